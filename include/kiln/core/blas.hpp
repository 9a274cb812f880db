#pragma once
// CBLAS for matrix products. KILN_HAVE_CBLAS is 1 when <cblas.h> is found (OpenBLAS's header on Debian), so a
// program built by hand needs only to link the library (-lopenblas); define KILN_HAVE_CBLAS=0 to use kiln's
// portable kernels without linking one. kiln's CMake target defines it to what it found and links that library.
#if !defined(KILN_HAVE_CBLAS)
#if defined(__has_include)
#if __has_include(<cblas.h>)
#define KILN_HAVE_CBLAS 1
#endif
#endif
#endif
#if !defined(KILN_HAVE_CBLAS)
#define KILN_HAVE_CBLAS 0
#endif

#if KILN_HAVE_CBLAS
#include <cblas.h>
#endif
