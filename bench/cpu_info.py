"""The machine's CPU as the benchmark scripts print it (bench/step/main_job.py,
bench/peers/*.py): its model name and widest x86 vector extension, which is
the SIMD target the kernels' dynamic dispatch picks."""


def cpu_model_and_isa():
    """(model name, "AVX-512" | "AVX2" | "no AVX2") from /proc/cpuinfo;
    ("unknown CPU", "no AVX2") where it cannot be read."""
    model, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
    except OSError:
        pass
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return model, isa
