// The x86-64 kernels' shared preamble. Private to inference/.
// - WEIR_X86: the compiler targets x86-64 with GNU extensions; the AVX2 and AVX-512 kernels and
//   their run-time dispatch are built only then.
// - WEIR_AVX512_BEGIN / WEIR_AVX512_END around code that uses AVX-512 intrinsics: GCC 12 warns
//   that the intrinsics' own _mm512_undefined_* "may be used" or "is used uninitialized" (a
//   false positive in its headers, GCC PR 105593).
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#define WEIR_X86 1
#endif

#define WEIR_AVX512_BEGIN                                                                    \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define WEIR_AVX512_END _Pragma("GCC diagnostic pop")
