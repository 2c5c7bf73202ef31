"""Training that grows: `fit.fit_growing` and its `GrowthSchedule`, the stretch of
updates both loops run (`stretch`), their backups (`backups`), the recipe that
places growths at equal compute (`recipe`), FLOPs (`compute`), Admin
initialisation for deep Post-LN stacks (`admin`) and tensor-parallel layouts
(`distribution`).
"""
