// Per-ISA builds of hot loops: GCC compiles a function marked WEIR_CLONES once for AVX-512,
// once for AVX2+FMA and once for baseline x86-64, and picks one at load time by the CPU.
// Sanitizer builds use the baseline only (ifunc resolvers run before ASan is ready).
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define WEIR_CLONES __attribute__((target_clones("avx512f", "arch=haswell", "default")))
#else
#define WEIR_CLONES
#endif
