from setuptools import find_packages, setup

setup(
    name="kwiden",
    version="0.1.0",
    description=(
        "Grow a trained Keras 3 Transformer into a wider one that computes the "
        "same function, and keep training from there."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["kwiden", "kwiden.*"]),
    package_data={"kwiden": ["data/*.gz", "data/*.md", "data/*.json"]},
    install_requires=[
        "keras>=3.8",
        "tensorflow>=2.18",
        "numpy",
        "tqdm",
        "safetensors",
        "tokenizers",
        "matplotlib",
        "scipy",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-xdist>=3.2",
            "jax[cpu]",
            "nbclient",
            "nbformat",
            "ipykernel",
            "keras-hub>=0.20",
            "matplotlib",
            "ruff",
            "jieba",
        ],
        "chinese": ["jieba"],  # kwiden pretrain --whole-word-mask
        "hub": ["keras-hub>=0.20"],
        "notebooks": ["jupyter", "matplotlib"],
        "benchmarks": ["matplotlib"],
    },
    entry_points={"console_scripts": ["kwiden=kwiden.cli:main"]},
    license="Apache-2.0",
)
