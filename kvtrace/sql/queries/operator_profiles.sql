-- Operator profiles (Vidur's mlp.csv, attention.csv, all_reduce.csv, send_recv.csv and
-- cpu_overheads.csv, read by the vidur-profile family): each operator's time against its
-- size, the work it does (FLOPs, bytes moved), the FLOP/s and bytes/s it achieved, and,
-- for a named GPU (gpu_peaks), its MFU and its roofline bound.
--
-- What Vidur measured: each row of its profiles is one operator of one transformer layer
-- on one tensor-parallel worker, run with FP16 weights and activations (2 bytes a
-- value), timed on the GPU by the PyTorch profiler; min, max, mean, median and std are
-- over the repeated runs, in milliseconds (Vidur fits its runtime model to the median,
-- and so does everything here).  mlp.csv's operators run on `num_tokens` tokens of one
-- iteration; attention.csv's attn_prefill runs one sequence's `prefill_chunk_size` new
-- tokens over `kv_cache_size` tokens already cached, attn_decode one new token for each
-- of `batch_size` sequences of `kv_cache_size` cached tokens; the collectives move
-- `size_bytes` per rank among `num_workers` ranks; cpu_overheads time the engine's CPU
-- steps per iteration of `batch_size` sequences.
--
-- The work per worker, with h = n_embd, t = tensor_parallel, d = n_embd / n_head (head
-- size), hq = n_head / t and hkv = n_kv_head / t (heads on the worker), f =
-- n_expanded_embd / t, g = 2 for a gated MLP (SwiGLU) else 1, m = num_tokens:
-- - a GEMM of m x k by k x n does 2mkn FLOPs and moves (mk + kn + mn) x 2 bytes
--   (reads both operands once, writes the result once): attn_pre_proj is m x h by
--   h x (hq + 2 hkv) d (the fused QKV projection), attn_post_proj m x hq d by hq d x h,
--   mlp_up_proj m x h by h x g f, mlp_down_proj m x f by f x h;
-- - attn_prefill (c = prefill_chunk_size, p = kv_cache_size, causal): new token i
--   (1..c) attends p + i keys, so QK^T and PV do 4 hq d (c p + c (c + 1) / 2) FLOPs; it
--   reads Q (c hq d), K and V of p + c tokens (2 (p + c) hkv d) and writes O (c hq d):
--   (2 c hq d + 2 (p + c) hkv d) x 2 bytes, times batch_size;
-- - attn_decode (b = batch_size, p = kv_cache_size): each sequence's new token attends
--   p + 1 keys: 4 b hq d (p + 1) FLOPs and b (2 hq d + 2 (p + 1) hkv d) x 2 bytes (the KV
--   cache read dominates);
-- - attn_kv_cache_save copies K and V of the new tokens (n = b c for a prefill, b for a
--   decode) into the cache: 4 n hkv d x 2 bytes (read and written);
-- - element-wise operators, bytes only (their FLOPs are not what bounds them):
--   input_layernorm and post_attention_layernorm read and write m h values
--   (2 m h x 2), attn_rope rewrites Q and K (2 m (hq + hkv) d x 2), mlp_act reads g f
--   and writes f per token ((g + 1) m f x 2), add reads two m h and writes one
--   (3 m h x 2), emb gathers and writes m h (2 m h x 2);
-- - collectives move size_bytes per rank: bytes = size_bytes; their bus bandwidth (as
--   NCCL's tests report it) is size_bytes / time x 2 (n - 1) / n for all_reduce over n
--   ranks and size_bytes / time for send_recv;
-- - the reshapes (0 time in Vidur's files) and the CPU steps have no FLOPs or bytes.
--
-- The roofline of a GPU (operator_roofline(gpu)): arithmetic intensity AI = FLOPs /
-- bytes; the attainable FLOP/s is min(peak FLOP/s, AI x bandwidth); the operator is
-- compute-bound when AI reaches the ridge point (peak / bandwidth), else memory-bound
-- (always for an operator without FLOPs); its roofline time is max(FLOPs / peak, bytes /
-- bandwidth), and roofline_share = roofline time / measured time (1 = at the roof).
-- MFU = achieved FLOP/s / peak dense FLOP/s.
--
-- Worked example (operator_roofline('a100-80gb'), a GEMM): Meta-Llama-3-8B's
-- mlp_up_proj at 32,768 tokens, TP 1 (h = 4,096, gated f = 14,336, so n = 28,672),
-- median 33.094 ms on Vidur's a100: FLOPs = 2 x 32,768 x 4,096 x 28,672 =
-- 7,696,581,394,432; bytes = (32,768 x 4,096 + 4,096 x 28,672 + 32,768 x 28,672) x 2 =
-- 2,382,364,672; achieved 7.6966e12 / 0.033094 s = 232.6 TFLOP/s, MFU 232.6 / 312 =
-- 0.745; AI = 3,230.6 FLOP/byte, above the ridge 312e12 / 2.039e12 = 153.0: compute
-- bound, roofline 7.6966e12 / 312e12 = 24.67 ms, roofline_share 0.745.
--
-- Worked example (attention decode): Llama-2-70B's shape at TP 2 (n_embd 8,192, 64
-- query and 8 KV heads: d = 128, hq = 32, hkv = 4), batch 64 at 2,688 cached tokens,
-- median 0.281 ms: FLOPs = 4 x 64 x 32 x 128 x 2,689 = 2,819,620,864; bytes = 64 x
-- (2 x 32 x 128 + 2 x 2,689 x 4 x 128) x 2 = 353,501,184; AI = 7.98: memory-bound on the
-- A100 80 GB, roofline 353,501,184 / 2.039e12 = 0.1734 ms, achieved 1.258e12 bytes/s,
-- roofline_share 0.617, MFU 2,819,620,864 / 0.000281 / 312e12 = 0.032.

-- @requires gpu_peaks.sql

-- @view operator_profiles
-- One row per (profile row, operator): the time of one operator at one size.
-- @column run_id             the run
-- @column source             mlp, attention, collectives or cpu_overheads
-- @column device             the GPU or network system the file's folders name
-- @column model              the model the folders (or cpu_overheads' model_name) name
-- @column row_idx            the data row in the file, from 0
-- @column operator           the operator as the profiler names it (mlp_up_proj, attn_decode, all_reduce, schedule, ...)
-- @column n_embd             hidden size
-- @column n_head             query heads
-- @column n_kv_head          KV heads
-- @column n_expanded_embd    MLP hidden size (mlp)
-- @column vocab_size         vocabulary (mlp)
-- @column use_gated_mlp      whether the MLP is gated (mlp)
-- @column tensor_parallel    tensor-parallel degree
-- @column num_tokens         tokens of the iteration (mlp)
-- @column batch_size         sequences (attention, cpu_overheads)
-- @column prefill_chunk_size new tokens of a prefill (attention)
-- @column kv_cache_size      tokens already cached (attention)
-- @column is_prefill         prefill or decode (attention)
-- @column block_size         paged-attention block size, tokens (attention)
-- @column max_model_len      the longest context profiled (attention)
-- @column backend            the attention backend as Vidur writes it
-- @column size_bytes         bytes per rank (collectives)
-- @column num_workers        ranks (collectives)
-- @column devices_per_node   ranks per node (collectives)
-- @column max_devices_per_node  GPUs a node has (collectives)
-- @column rank               the rank that recorded the time (collectives)
-- @column time_min_ms        fastest run, ms
-- @column time_max_ms        slowest run, ms
-- @column time_mean_ms       mean, ms
-- @column time_median_ms     median, ms
-- @column time_std_ms        standard deviation, ms
CREATE VIEW operator_profiles AS SELECT * FROM _operator_profiles_files;

-- @view operator_work
-- One row per timed operator: its size, time, FLOPs and bytes (the header's formulas) and what it achieved.
-- @column run_id             the run
-- @column source             mlp, attention, collectives or cpu_overheads
-- @column device             the GPU or network system profiled
-- @column model              the model profiled
-- @column row_idx            the data row in the file
-- @column operator           the operator
-- @column tensor_parallel    tensor-parallel degree
-- @column num_workers        ranks of a collective
-- @column devices_per_node   ranks of a collective on one node
-- @column size               what the time grows with: tokens (mlp), new tokens (prefill), cached tokens read (decode: batch x (kv_cache_size + 1)), bytes (collectives), sequences (cpu_overheads)
-- @column size_unit          tokens, new tokens, kv tokens, bytes or sequences
-- @column time_ms            the median time, ms
-- @column time_std_ms        its standard deviation, ms
-- @column gemm_m             a GEMM's m (rows: tokens)
-- @column gemm_k             a GEMM's k (the reduced dimension)
-- @column gemm_n             a GEMM's n (output columns on this worker)
-- @column flops              FLOPs per run (NULL: not counted for this operator)
-- @column bytes              bytes moved per run (NULL: not counted)
-- @column achieved_flops_per_s  flops / time
-- @column achieved_bytes_per_s  bytes / time (collectives: the algorithm bandwidth)
-- @column bus_bytes_per_s    collectives: the bus bandwidth, as NCCL's tests report it
CREATE VIEW operator_work AS
WITH shaped AS (
    SELECT *,
           n_embd // n_head AS head_dim,
           n_head // tensor_parallel AS q_heads,
           n_kv_head // tensor_parallel AS kv_heads,
           n_expanded_embd // tensor_parallel AS mlp_dim,
           CASE WHEN use_gated_mlp THEN 2 ELSE 1 END AS up_factor
    FROM operator_profiles
),
gemms AS (
    SELECT *,
           CASE WHEN operator IN ('attn_pre_proj', 'attn_post_proj', 'mlp_up_proj',
                                  'mlp_down_proj') THEN num_tokens END AS gemm_m,
           CASE operator
               WHEN 'attn_pre_proj' THEN n_embd
               WHEN 'attn_post_proj' THEN q_heads * head_dim
               WHEN 'mlp_up_proj' THEN n_embd
               WHEN 'mlp_down_proj' THEN mlp_dim END AS gemm_k,
           CASE operator
               WHEN 'attn_pre_proj' THEN (q_heads + 2 * kv_heads) * head_dim
               WHEN 'attn_post_proj' THEN n_embd
               WHEN 'mlp_up_proj' THEN up_factor * mlp_dim
               WHEN 'mlp_down_proj' THEN n_embd END AS gemm_n
    FROM shaped
),
work AS (
    SELECT *,
           CASE WHEN gemm_m IS NOT NULL THEN 2 * gemm_m * gemm_k * gemm_n
                WHEN operator = 'attn_prefill' THEN
                    4 * batch_size * q_heads * head_dim
                      * (prefill_chunk_size * kv_cache_size
                         + prefill_chunk_size * (prefill_chunk_size + 1) // 2)
                WHEN operator = 'attn_decode' THEN
                    4 * batch_size * q_heads * head_dim * (kv_cache_size + 1)
           END AS flops,
           CASE WHEN gemm_m IS NOT NULL
                    THEN (gemm_m * gemm_k + gemm_k * gemm_n + gemm_m * gemm_n) * 2
                WHEN operator = 'attn_prefill' THEN
                    batch_size * (2 * prefill_chunk_size * q_heads * head_dim
                                  + 2 * (kv_cache_size + prefill_chunk_size) * kv_heads
                                      * head_dim) * 2
                WHEN operator = 'attn_decode' THEN
                    batch_size * (2 * q_heads * head_dim
                                  + 2 * (kv_cache_size + 1) * kv_heads * head_dim) * 2
                WHEN operator = 'attn_kv_cache_save' THEN
                    4 * batch_size * CASE WHEN is_prefill THEN prefill_chunk_size ELSE 1 END
                      * kv_heads * head_dim * 2
                WHEN operator IN ('input_layernorm', 'post_attention_layernorm', 'emb')
                    THEN 2 * num_tokens * n_embd * 2
                WHEN operator = 'attn_rope' THEN
                    2 * num_tokens * (q_heads + kv_heads) * head_dim * 2
                WHEN operator = 'mlp_act' THEN (up_factor + 1) * num_tokens * mlp_dim * 2
                WHEN operator = 'add' THEN 3 * num_tokens * n_embd * 2
                WHEN source = 'collectives' THEN size_bytes
           END AS bytes,
           CASE WHEN operator = 'all_reduce' THEN 2.0 * (num_workers - 1) / num_workers
                WHEN operator = 'send_recv' THEN 1.0 END AS bus_factor,
           nullif(time_median_ms, 0) / 1e3 AS seconds
    FROM gemms
)
SELECT run_id, source, device, model, row_idx, operator, tensor_parallel, num_workers,
       devices_per_node,
       CASE source
           WHEN 'mlp' THEN num_tokens
           WHEN 'attention' THEN CASE WHEN is_prefill THEN prefill_chunk_size
                                      ELSE batch_size * (kv_cache_size + 1) END
           WHEN 'collectives' THEN size_bytes
           WHEN 'cpu_overheads' THEN batch_size END AS size,
       CASE source
           WHEN 'mlp' THEN 'tokens'
           WHEN 'attention' THEN CASE WHEN is_prefill THEN 'new tokens' ELSE 'kv tokens' END
           WHEN 'collectives' THEN 'bytes'
           WHEN 'cpu_overheads' THEN 'sequences' END AS size_unit,
       time_median_ms AS time_ms, time_std_ms, gemm_m, gemm_k, gemm_n, flops, bytes,
       flops / seconds AS achieved_flops_per_s,
       bytes / seconds AS achieved_bytes_per_s,
       bytes * bus_factor / seconds AS bus_bytes_per_s
FROM work
ORDER BY run_id, source, device, model, operator, size, row_idx;

-- @macro operator_roofline(gpu_name)
-- The GPU operators (mlp, attention) with FLOPs or bytes, against gpu_name's roofline (gpu_peaks).
-- @column run_id             the run
-- @column source             mlp or attention
-- @column device             the GPU profiled (as the folders name it)
-- @column model              the model profiled
-- @column row_idx            the data row in the file
-- @column operator           the operator
-- @column tensor_parallel    tensor-parallel degree
-- @column size               what the time grows with (operator_work)
-- @column size_unit          its unit
-- @column time_ms            the median time, ms
-- @column flops              FLOPs per run (NULL for an element-wise operator)
-- @column bytes              bytes moved per run
-- @column gpu                the GPU whose peaks are used
-- @column achieved_flops_per_s  flops / time
-- @column achieved_bytes_per_s  bytes / time
-- @column mfu                achieved FLOP/s / the GPU's peak dense FLOP/s
-- @column bandwidth_share    achieved bytes/s / the GPU's memory bandwidth
-- @column arithmetic_intensity  flops / bytes, FLOP per byte
-- @column attainable_flops_per_s  min(peak FLOP/s, arithmetic_intensity x bandwidth)
-- @column bound              compute or memory: which roof holds the operator down
-- @column roofline_ms        max(flops / peak, bytes / bandwidth): the fastest the GPU allows, ms
-- @column roofline_share     roofline_ms / time_ms: 1 is at the roof
CREATE MACRO operator_roofline(gpu_name) AS TABLE
SELECT w.run_id, w.source, w.device, w.model, w.row_idx, w.operator, w.tensor_parallel,
       w.size, w.size_unit, w.time_ms, w.flops, w.bytes, p.gpu,
       w.achieved_flops_per_s, w.achieved_bytes_per_s,
       w.achieved_flops_per_s / p.dense_flops_per_s AS mfu,
       w.achieved_bytes_per_s / p.memory_bytes_per_s AS bandwidth_share,
       w.flops / w.bytes AS arithmetic_intensity,
       least(p.dense_flops_per_s, w.flops / w.bytes * p.memory_bytes_per_s)
           AS attainable_flops_per_s,
       CASE WHEN w.flops IS NOT NULL AND w.flops / w.bytes >= p.ridge_flops_per_byte
            THEN 'compute' ELSE 'memory' END AS bound,
       greatest(coalesce(w.flops, 0) / p.dense_flops_per_s,
                w.bytes / p.memory_bytes_per_s) * 1e3 AS roofline_ms,
       greatest(coalesce(w.flops, 0) / p.dense_flops_per_s,
                w.bytes / p.memory_bytes_per_s) * 1e3 / nullif(w.time_ms, 0)
           AS roofline_share
FROM operator_work AS w, _gpu_peak(gpu_name) AS p
WHERE w.source IN ('mlp', 'attention') AND w.bytes IS NOT NULL
ORDER BY w.run_id, w.source, w.device, w.model, w.operator, w.size, w.row_idx;
