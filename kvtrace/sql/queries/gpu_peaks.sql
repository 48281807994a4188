-- Peak dense tensor throughput and memory bandwidth of data-centre GPUs, from the
-- vendor's datasheets: what MFU and the roofline (operator_profiles.sql) divide by.
--
-- Datasheets print tensor FLOP/s "with sparsity" (2:4 structured sparsity doubles
-- them); the dense figure, which a dense GEMM or attention kernel can reach, is half of
-- that.  BF16 and FP16 tensor throughput are the same on every GPU listed.  Bandwidth is
-- the device memory's (HBM or GDDR) in bytes per second, decimal (1 TB/s = 1e12 B/s).
-- The A10G (AWS G5) is not listed: NVIDIA publishes no datasheet for it.  Vidur names
-- its devices a100 (80 GB SXM in a100_dgx, 80 GB PCIe in a100_pair_nvlink), h100
-- (SXM in h100_dgx, NVL in h100_pair_nvlink) and a40; its own device configs
-- (vidur/config/device_sku_config.py) take 312, 1000 and 150 TFLOP/s.
--
-- Worked example: the H100 SXM datasheet prints 1,979 BF16 tensor TFLOP/s with
-- sparsity, so dense_flops_per_s = 989.5e12; with 3.35 TB/s its ridge point is
-- 989.5e12 / 3.35e12 = 295.4 FLOP/byte: an operator doing fewer FLOPs per byte it
-- moves is bound by memory on it.

-- @view gpu_peaks
-- One row per GPU: dense BF16/FP16 tensor FLOP/s, memory bandwidth and size, with the source.
-- @column gpu                 the name operator_roofline takes (lower case)
-- @column memory_gb           device memory, GB as the datasheet gives it
-- @column dense_flops_per_s   dense BF16/FP16 tensor-core FLOP/s (half the sparse figure printed)
-- @column memory_bytes_per_s  device memory bandwidth, bytes per second
-- @column ridge_flops_per_byte  dense_flops_per_s / memory_bytes_per_s: the roofline's ridge point
-- @column source              the vendor's datasheet or product page
CREATE VIEW gpu_peaks AS
SELECT gpu, memory_gb, dense_flops_per_s, memory_bytes_per_s,
       dense_flops_per_s / memory_bytes_per_s AS ridge_flops_per_byte, source
FROM (VALUES
    ('a100-40gb', 40, 312e12, 1555e9,
     'https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf'),
    ('a100-80gb', 80, 312e12, 2039e9,
     'https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf'),
    ('a100-80gb-pcie', 80, 312e12, 1935e9,
     'https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf'),
    ('h100-sxm', 80, 989.5e12, 3350e9,
     'https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet'),
    ('h100-pcie', 80, 756.5e12, 2000e9,
     'https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet'),
    ('h100-nvl', 94, 835.5e12, 3900e9,
     'https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet'),
    ('h200', 141, 989.5e12, 4800e9, 'https://www.nvidia.com/en-us/data-center/h200/'),
    ('l40s', 48, 362.05e12, 864e9, 'https://www.nvidia.com/en-us/data-center/l40s/'),
    ('a40', 48, 149.7e12, 696e9,
     'https://images.nvidia.com/content/Solutions/data-center/a40/nvidia-a40-datasheet.pdf'),
    ('a10', 24, 125e12, 600e9,
     'https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/datasheet-new/nvidia-a10-datasheet.pdf'),
    ('l4', 24, 121e12, 300e9, 'https://www.nvidia.com/en-us/data-center/l4/')
) AS peaks(gpu, memory_gb, dense_flops_per_s, memory_bytes_per_s, source);

-- @macro _gpu_peak(gpu_name)
-- The gpu_peaks row of gpu_name, or an error listing the GPUs known.
CREATE MACRO _gpu_peak(gpu_name) AS TABLE
SELECT p.*
FROM gpu_peaks AS p
WHERE p.gpu = lower(gpu_name)
   OR (NOT EXISTS (SELECT 1 FROM gpu_peaks WHERE gpu = lower(gpu_name))
       AND error('no peak figures for GPU ''' || gpu_name || '''; gpu_peaks knows '
                 || (SELECT string_agg(gpu, ', ' ORDER BY gpu) FROM gpu_peaks)) IS NULL);
