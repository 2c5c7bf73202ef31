"""The authors' formulas, transcribed into float64 numpy: what tests/parity holds kwiden to.

Each function names the function of bert4keras (github.com/bojone/bert4keras, `bert4keras/…`) or of
ZhuiyiTechnology's simbert.py (github.com/ZhuiyiTechnology/simbert) it follows. They read weights by the
names of Google's checkpoints (bert4keras' `BERT.variable_mapping`), so the layout is part of what is held.
Nothing here calls kwiden.
"""

import numpy as np
from scipy.special import erf, logsumexp

# --- bert4keras/backend.py ---------------------------------------------------------------------------------


def gelu_erf(x):
    """backend.gelu_erf: what bert4keras' `hidden_act="gelu"` is (its custom_objects map "gelu" to it)."""
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def softmax(x, axis=-1):
    """snippets.softmax (and Keras' softmax): exp(x − max) normalised; −inf entries get 0."""
    x = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def align(tensor, axes, ndim):
    """backend.align: `tensor`'s axes put at `axes` of an `ndim`-dimensional shape, the others of size 1."""
    axes = [a if a >= 0 else ndim + a for a in axes]
    shape = [1] * ndim
    for axis, size in zip(axes, tensor.shape):
        shape[axis] = size
    return tensor.reshape(shape)


def sequence_masking(x, mask=None, value=-np.inf, axis=None, bias=None):
    """backend.sequence_masking: `value` where `mask` (batch, seq) is False along each of `axis`; a boolean
    `bias` is one more mask (GlobalPointer's lower triangle), a numeric one added."""
    if mask is None and bias is None:
        return x
    if mask is None:
        return np.where(bias, x, value) if bias.dtype == bool else x + bias
    axes = [1] if axis is None else (axis if isinstance(axis, list) else [axis])
    axes = [a if a >= 0 else x.ndim + a for a in axes]
    mask = mask.astype(bool)
    full = align(mask, [0, axes[0]], x.ndim)
    for a in axes[1:]:
        full = full & align(mask, [0, a], x.ndim)
    if bias is None:
        return np.where(full, x, value)
    if bias.dtype == bool:
        return np.where(full & bias, x, value)
    return np.where(full, x + bias, value)


def sinusoidal_embeddings(pos, dim, base=10000.0):
    """backend.sinusoidal_embeddings: pos · base^(−2i/dim), as interleaved (sin, cos) pairs."""
    indices = base ** (-2 * np.arange(dim // 2, dtype=np.float64) / dim)
    angles = np.einsum("...,d->...d", np.asarray(pos, np.float64), indices)
    return np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(*angles.shape[:-1], dim)


def apply_rotary_position_embeddings(sinusoidal, *tensors):
    """backend.apply_rotary_position_embeddings: `sinusoidal` (batch, seq, d) from `sinusoidal_embeddings`,
    tensors (batch, seq, …, d); each pair (x_2i, x_2i+1) turned by its angle."""
    ndim = tensors[0].ndim
    sinusoidal = align(sinusoidal, [0, 1, -1], ndim)
    cos_pos = np.repeat(sinusoidal[..., 1::2], 2, axis=-1)
    sin_pos = np.repeat(sinusoidal[..., ::2], 2, axis=-1)
    outputs = []
    for tensor in tensors:
        turned = np.stack([-tensor[..., 1::2], tensor[..., ::2]], axis=ndim).reshape(tensor.shape)
        outputs.append(tensor * cos_pos + turned * sin_pos)
    return outputs[0] if len(outputs) == 1 else outputs


def multilabel_categorical_crossentropy(y_true, y_pred):
    """backend.multilabel_categorical_crossentropy: log(1 + Σ_neg e^s) + log(1 + Σ_pos e^−s); −inf scores
    (masked spans) count for nothing."""
    y_mask = y_pred != -np.inf
    with np.errstate(divide="ignore"):
        y_neg = np.where(y_mask, y_pred, -np.inf) + np.log(1 - y_true)
        y_pos = np.where(y_mask, -y_pred, -np.inf) + np.log(y_true)
    zeros = np.zeros_like(y_pred[..., :1])
    return logsumexp(np.concatenate([y_neg, zeros], -1), -1) + logsumexp(np.concatenate([y_pos, zeros], -1), -1)


# --- bert4keras/layers.py and models.py: BERT, RoFormer, UniLM ----------------------------------------------


def layer_norm(x, gamma, beta, epsilon):
    """layers.LayerNormalization (zero mean, unit variance, divide_no_nan) then ScaleOffset (× γ, + β)."""
    x = x - x.mean(-1, keepdims=True)
    x = x / np.sqrt(np.mean(x**2, -1, keepdims=True) + epsilon)
    return x * gamma + beta


def dense(x, weights, name, activation=None):
    """A Keras Dense read from the Google tensors `name/kernel` and `name/bias`."""
    y = x @ weights[f"{name}/kernel"] + weights[f"{name}/bias"]
    return y if activation is None else activation(y)


def unilm_mask(segment_ids):
    """models.UniLM_Mask.compute_attention_bias: idxs = cumsum(segment ids); query i sees key j where
    idxs[j] ≤ idxs[i]. (batch, queries, keys)."""
    idxs = np.cumsum(segment_ids, axis=1)
    return idxs[:, None, :] <= idxs[:, :, None]


def multi_head_attention(x, weights, prefix, heads, padding, bias=None, rotary=None):
    """layers.MultiHeadAttention.call and pay_attention_to (softmax, attention_scale): q, k, v Dense
    (bert/encoder/layer_i/attention/self/{query,key,value}), reshaped to (heads, key_size); RoPE on q and k
    (`p_bias="rotary"`); einsum 'bjhd,bkhd->bhjk' / √key_size; keys masked by the padding (v_mask) and a
    boolean `bias` (UniLM's) to −inf (attention_normalize → sequence_masking); softmax; the output Dense."""
    b, n, _ = x.shape
    q, k, v = (
        dense(x, weights, f"{prefix}/attention/self/{p}").reshape(b, n, heads, -1) for p in ("query", "key", "value")
    )
    if rotary is not None:
        q, k = apply_rotary_position_embeddings(rotary, q, k)
    a = np.einsum("bjhd,bkhd->bhjk", q, k) / np.sqrt(q.shape[-1])
    if bias is not None:
        bias = align(bias, [0, -2, -1], a.ndim)
    a = sequence_masking(a, padding, -np.inf, -1, bias)
    o = np.einsum("bhjk,bkhd->bjhd", softmax(a), v).reshape(b, n, -1)
    return dense(o, weights, f"{prefix}/attention/output/dense")


def bert(weights, config, token_ids, segment_ids, unilm=False, rotary=False):
    """models.BERT (or, with `rotary`, models.RoFormer) built by build_transformer_model from a Google
    checkpoint, with `with_pool="linear"` and `with_mlm=True` (and `application="unilm"` with `unilm`).

    Returns `(sequence, pooled, logits, probas)`: the last layer; the pooler (apply_final_layers: Dense on
    x[:, 0] with the 'linear' activation); the MLM head's logits before MLM-Activation (Dense with hidden_act,
    LayerNorm, the token table transposed (Embedding mode 'dense'), + cls/predictions/output_bias) and its
    softmax, which is what `with_mlm=True` outputs.

    LayerNorm ε: BERT's norms are all built with epsilon=1e-12 whatever the config says; RoFormer's embedding
    and block norms (NEZHA.apply_embeddings, RoFormer.apply_main_layers) with none, so Keras' K.epsilon() =
    1e-7, and its MLM-Norm (BERT.apply_final_layers) with 1e-12. Embeddings: BERT adds token, segment and
    position tables (apply_embeddings); NEZHA/RoFormer token and segment only, positions turn q and k
    (SinusoidalPositionEmbedding of attention_key_size, merge_mode 'zero'). Padding: token id 0
    (Embedding-Token's mask_zero), masked as a key.
    """
    token_ids, segment_ids = np.asarray(token_ids), np.asarray(segment_ids)
    n = token_ids.shape[1]
    heads = config["num_attention_heads"]
    activation = {"gelu": gelu_erf}[config["hidden_act"]]
    epsilon = 1e-7 if rotary else 1e-12
    x = (
        weights["bert/embeddings/word_embeddings"][token_ids]
        + weights["bert/embeddings/token_type_embeddings"][segment_ids]
    )
    if not rotary:
        x = x + weights["bert/embeddings/position_embeddings"][:n][None]
    x = layer_norm(x, weights["bert/embeddings/LayerNorm/gamma"], weights["bert/embeddings/LayerNorm/beta"], epsilon)
    padding = token_ids != 0
    bias = unilm_mask(segment_ids) if unilm else None
    positions = None
    if rotary:
        positions = sinusoidal_embeddings(np.arange(n)[None], config["hidden_size"] // heads)
    for i in range(config["num_hidden_layers"]):
        prefix = f"bert/encoder/layer_{i}"
        y = multi_head_attention(x, weights, prefix, heads, padding, bias, positions)
        norm = f"{prefix}/attention/output/LayerNorm"
        x = layer_norm(x + y, weights[f"{norm}/gamma"], weights[f"{norm}/beta"], epsilon)
        y = dense(dense(x, weights, f"{prefix}/intermediate/dense", activation), weights, f"{prefix}/output/dense")
        norm = f"{prefix}/output/LayerNorm"
        x = layer_norm(x + y, weights[f"{norm}/gamma"], weights[f"{norm}/beta"], epsilon)
    pooled = dense(x[:, 0], weights, "bert/pooler/dense")
    h = dense(x, weights, "cls/predictions/transform/dense", activation)
    norm = "cls/predictions/transform/LayerNorm"
    h = layer_norm(h, weights[f"{norm}/gamma"], weights[f"{norm}/beta"], 1e-12)
    logits = h @ weights["bert/embeddings/word_embeddings"].T + weights["cls/predictions/output_bias"]
    return x, pooled, logits, softmax(logits)


# --- simbert.py ----------------------------------------------------------------------------------------------


def encode(vocab, first, second=None):
    """bert4keras' Tokenizer.encode on texts of whole words of `vocab`: [CLS] first [SEP] (second [SEP]),
    segment 1 on the second text and its [SEP]."""
    first = [vocab.index(w) for w in first.split()]
    token_ids = [vocab.index("[CLS]"), *first, vocab.index("[SEP]")]
    segment_ids = [0] * len(token_ids)
    if second is not None:
        second = [vocab.index(w) for w in second.split()] + [vocab.index("[SEP]")]
        token_ids += second
        segment_ids += [1] * len(second)
    return token_ids, segment_ids


def sequence_padding(rows):
    """snippets.sequence_padding: rows padded with 0 to the longest."""
    out = np.zeros((len(rows), max(len(r) for r in rows)), np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def simbert_batch(vocab, pairs):
    """simbert.py's data_generator: each (text, synonym) encoded both ways, as adjacent rows, padded."""
    token_ids, segment_ids = [], []
    for text, synonym in pairs:
        for a, b in ((text, synonym), (synonym, text)):
            t, s = encode(vocab, a, b)
            token_ids.append(t), segment_ids.append(s)
    return sequence_padding(token_ids), sequence_padding(segment_ids)


def l2_normalize(x, axis=-1):
    """Keras' K.l2_normalize: x / √max(Σx², 1e-12)."""
    return x / np.sqrt(np.maximum(np.sum(x**2, axis=axis, keepdims=True), 1e-12))


def compute_loss_of_similarity(pooled):
    """simbert.py's TotalLoss.compute_loss_of_similarity, a loss a row: the partner (rows 2i ↔ 2i+1,
    get_labels_of_similarity) by softmax cross-entropy of the l2-normalised vectors' cosines, the diagonal
    −1e12, × 30."""
    rows = len(pooled)
    idxs = np.arange(rows)
    labels = (idxs[None, :] == (idxs + 1 - idxs % 2 * 2)[:, None]).astype(np.float64)
    vectors = l2_normalize(pooled, axis=1)
    similarities = (vectors @ vectors.T - np.eye(rows) * 1e12) * 30
    log_probas = similarities - logsumexp(similarities, axis=-1, keepdims=True)
    return -(labels * log_probas).sum(-1)


def compute_loss_of_seq2seq(token_ids, segment_ids, probas):
    """simbert.py's TotalLoss.compute_loss_of_seq2seq: y_true[:, 1:] against y_pred[:, :-1] (probabilities:
    Keras 2's sparse_categorical_crossentropy, −log of the clipped probability), masked by segment_ids[:, 1:],
    the mean over the masked."""
    y_true, y_mask, y_pred = token_ids[:, 1:], segment_ids[:, 1:], probas[:, :-1]
    p = np.take_along_axis(y_pred, y_true[..., None], axis=-1)[..., 0]
    loss = -np.log(np.clip(p, 1e-7, 1 - 1e-7))
    return np.sum(loss * y_mask) / np.sum(y_mask)


# --- bert4keras/snippets.py: AutoRegressiveDecoder ------------------------------------------------------------


def unilm_predict(weights, config, rotary=False):
    """The `predict` of simbert.py's SynonymsGenerator and bert4keras' examples' seq2seq decoders
    (AutoRegressiveDecoder.wraps(default_rtype='probas')): the whole sequence recomputed, the prompt as
    segment 0 and the output ids as segment 1, the last position's probabilities; asked with rtype='logits'
    (as beam_search asks), log(probas + 1e-12)."""

    def predict(inputs, output_ids):
        token_ids, segment_ids = inputs
        token_ids = np.concatenate([token_ids, output_ids], 1)
        segment_ids = np.concatenate([segment_ids, np.ones_like(output_ids)], 1)
        probas = bert(weights, config, token_ids, segment_ids, unilm=True, rotary=rotary)[3][:, -1]
        return np.log(probas + 1e-12)

    return predict


def beam_search(predict, inputs, topk, end_id, maxlen, minlen=1, min_ends=1):
    """AutoRegressiveDecoder.beam_search (start_id None): each step, the running sums of log-probabilities of
    the beams plus the next token's, the top `topk` over beams × vocabulary kept (argpartition); the best
    beam returned as soon as it ends with `end_id` (its end included), finished beams dropped, else the best
    after `maxlen` steps. bert4keras' greedy decoding is this with topk=1 (its seq2seq examples'
    `beam_search(…, topk=1)`; AutoRegressiveDecoder has no separate greedy search)."""
    inputs = [np.array([i]) for i in inputs]
    output_ids, output_scores = np.empty((1, 0), dtype=int), np.zeros(1)
    for step in range(maxlen):
        scores = predict(inputs, output_ids)
        if step == 0:
            inputs = [np.repeat(i, topk, axis=0) for i in inputs]
        scores = output_scores.reshape((-1, 1)) + scores
        indices = scores.argpartition(-topk, axis=None)[-topk:]
        indices_1 = indices // scores.shape[1]
        indices_2 = (indices % scores.shape[1]).reshape((-1, 1))
        output_ids = np.concatenate([output_ids[indices_1], indices_2], 1)
        output_scores = np.take_along_axis(scores, indices, axis=None)
        is_end = output_ids[:, -1] == end_id if end_id is not None else np.zeros(len(output_ids), bool)
        end_counts = (output_ids == end_id).sum(1) if end_id is not None else np.zeros(len(output_ids), int)
        if output_ids.shape[1] >= minlen:
            best = output_scores.argmax()
            if is_end[best] and end_counts[best] >= min_ends:
                return output_ids[best]
            flag = ~is_end | (end_counts < min_ends)
            if not flag.all():
                inputs = [i[flag] for i in inputs]
                output_ids, output_scores, end_counts = output_ids[flag], output_scores[flag], end_counts[flag]
                topk = flag.sum()
    return output_ids[output_scores.argmax()]


# --- bert4keras/layers.py: GlobalPointer, EfficientGlobalPointer, ConditionalRandomField ----------------------


def global_pointer(x, kernel, bias, heads, head_size, rope=True, tril_mask=True, mask=None):
    """layers.GlobalPointer.call: Dense to heads·2·head_size, tf.split into `heads` parts stacked on axis
    −2, q the first head_size of each part and k the rest; RoPE on both (SinusoidalPositionEmbedding
    'zero' + apply_rotary_position_embeddings); einsum 'bmhd,bnhd->bhmn' / √head_size; padding and, with
    `tril_mask`, the spans below the diagonal (band_part(ones, 0, −1) kept) set to −inf."""
    h = x @ kernel + bias
    h = np.stack(np.split(h, heads, axis=-1), axis=-2)
    qw, kw = h[..., :head_size], h[..., head_size:]
    if rope:
        pos = sinusoidal_embeddings(np.arange(x.shape[1])[None], head_size)
        qw, kw = apply_rotary_position_embeddings(pos, qw, kw)
    logits = np.einsum("bmhd,bnhd->bhmn", qw, kw) / head_size**0.5
    tril = np.triu(np.ones(logits.shape[-2:], bool)) if tril_mask else None
    return sequence_masking(logits, mask, -np.inf, [2, 3], tril)


def efficient_global_pointer(x, p_kernel, p_bias, q_kernel, q_bias, heads, head_size, rope=True, tril_mask=True,
                             mask=None):  # fmt: skip
    """layers.EfficientGlobalPointer.call: p_dense to 2·head_size, q = its even columns and k its odd ones,
    RoPE, einsum 'bmd,bnd->bmn' / √head_size; q_dense on p_dense's output, transposed and halved: its even
    rows added along the span's end, its odd rows along its start; masked as GlobalPointer."""
    inputs = x @ p_kernel + p_bias
    qw, kw = inputs[..., ::2], inputs[..., 1::2]
    if rope:
        pos = sinusoidal_embeddings(np.arange(x.shape[1])[None], head_size)
        qw, kw = apply_rotary_position_embeddings(pos, qw, kw)
    logits = np.einsum("bmd,bnd->bmn", qw, kw) / head_size**0.5
    bias = np.einsum("bnh->bhn", inputs @ q_kernel + q_bias) / 2
    logits = logits[:, None] + bias[:, ::2, None] + bias[:, 1::2, :, None]
    tril = np.triu(np.ones(logits.shape[-2:], bool)) if tril_mask else None
    return sequence_masking(logits, mask, -np.inf, [2, 3], tril)


def crf_call(emissions, mask):
    """layers.ConditionalRandomField.call: the emissions, −inf at padded positions."""
    return sequence_masking(emissions, mask, -np.inf, 1)


def crf_dense_loss(y_true, y_pred, trans):
    """layers.ConditionalRandomField.dense_loss: log Z − target score a row. Padding is read from
    y_pred's −inf; y_true (one-hot) and y_pred are zeroed there. target_score: Σ one-hot · emissions +
    Σ_t y_t T y_{t+1} (einsum 'bni,ij,bnj->b'); log Z: log_norm_step's forward recursion in log space from
    y_pred[:, 0], a padded step keeping the state, logsumexp of the last state."""
    mask = np.all(y_pred != -np.inf, axis=2, keepdims=True)
    y_true = np.where(mask, y_true, 0.0)
    y_pred = np.where(mask, y_pred, 0.0)
    point_score = np.einsum("bni,bni->b", y_true, y_pred)
    trans_score = np.einsum("bni,ij,bnj->b", y_true[:, :-1], trans, y_true[:, 1:])
    states = y_pred[:, 0]
    for t in range(1, y_pred.shape[1]):
        outputs = logsumexp(states[:, :, None] + trans[None], axis=1) + y_pred[:, t]
        m = mask[:, t].astype(np.float64)
        states = m * outputs + (1 - m) * states
    return logsumexp(states, axis=1) - (point_score + trans_score)


def viterbi_decode(nodes, trans, starts=None, ends=None):
    """snippets.ViterbiDecoder(trans, starts, ends).decode(nodes): nodes (seq_len, num_labels) of one
    sequence; labels not in `starts` (`ends`) cannot start (end) it; dynamic programming keeping the best
    path into each label; the best final label's path."""
    num_labels = len(trans)
    nodes = np.array(nodes, np.float64)
    if starts is not None:
        nodes[0, [i for i in range(num_labels) if i not in starts]] -= np.inf
    if ends is not None:
        nodes[-1, [i for i in range(num_labels) if i not in ends]] -= np.inf
    labels = np.arange(num_labels).reshape((1, -1))
    scores = nodes[0].reshape((-1, 1))
    paths = labels
    for step in range(1, len(nodes)):
        M = scores + trans + nodes[step].reshape((1, -1))
        idxs = M.argmax(0)
        scores = M.max(0).reshape((-1, 1))
        paths = np.concatenate([paths[:, idxs], labels], 0)
    return paths[:, scores[:, 0].argmax()]
