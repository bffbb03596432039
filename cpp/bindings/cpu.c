/* twolayer._cpu: which instruction levels were compiled in and which this CPU (and OS) can run, for the loader
 * python/twolayer/_core.py. Compiled with the platform's baseline flags: it must run on any CPU.
 *
 * x86-64 levels are the psABI's microarchitecture levels, checked bit by bit with CPUID (and XGETBV for the OS's
 * saving of the AVX / AVX-512 registers), exactly the features -march=x86-64-vN lets the compiler use:
 *   v2: CX16, LAHF, POPCNT, SSE3, SSSE3, SSE4.1, SSE4.2
 *   v3: v2 + AVX, AVX2, BMI1, BMI2, F16C, FMA, LZCNT, MOVBE, OS-enabled YMM state
 *   v4: v3 + AVX512F, AVX512BW, AVX512CD, AVX512DQ, AVX512VL, OS-enabled ZMM and opmask state
 * Other architectures have one level, "baseline"; a TWOLAYER_NATIVE build has one level, "native". */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifndef TWOLAYER_LEVELS
#define TWOLAYER_LEVELS "baseline"
#endif

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define TWOLAYER_X86 1

static unsigned long long xgetbv0(void) {
  unsigned int eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return ((unsigned long long)edx << 32) | eax;
}

#define BIT(reg, n) (((reg) >> (n)) & 1u)

/* The highest x86-64 level this CPU and OS support: 1 (baseline) to 4. */
static int x86_level(void) {
  unsigned int a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 1;
  const unsigned int c1 = c;
  unsigned int b7 = 0, cx = 0;
  if (__get_cpuid_max(0, 0) >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    b7 = b;
  }
  if (__get_cpuid(0x80000001u, &a, &b, &c, &d)) cx = c;
  const int v2 = BIT(c1, 0) && BIT(c1, 9) && BIT(c1, 13) && BIT(c1, 19) && BIT(c1, 20) && BIT(c1, 23) && BIT(cx, 0);
  if (!v2) return 1;
  const unsigned long long xcr0 = BIT(c1, 27) ? xgetbv0() : 0; /* OSXSAVE: the OS saves extended registers */
  const int ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xe6) == 0xe6;
  const int v3 = ymm && BIT(c1, 12) && BIT(c1, 22) && BIT(c1, 28) && BIT(c1, 29) && BIT(b7, 3) && BIT(b7, 5) &&
                 BIT(b7, 8) && BIT(cx, 5);
  if (!v3) return 2;
  const int v4 = zmm && BIT(b7, 16) && BIT(b7, 17) && BIT(b7, 28) && BIT(b7, 30) && BIT(b7, 31);
  return v4 ? 4 : 3;
}
#endif

/* supported() -> tuple of the level names this CPU can run, lowest first. */
static PyObject* supported(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
#ifdef TWOLAYER_X86
  static const char* names[] = {"baseline", "v2", "v3", "v4"};
  const int n = x86_level();
  PyObject* out = PyTuple_New(n);
  if (!out) return NULL;
  for (int i = 0; i < n; ++i) {
    PyObject* s = PyUnicode_FromString(names[i]);
    if (!s) {
      Py_DECREF(out);
      return NULL;
    }
    PyTuple_SET_ITEM(out, i, s);
  }
  return out;
#else
  return Py_BuildValue("(s)", "baseline");
#endif
}

static PyMethodDef methods[] = {
    {"supported", supported, METH_NOARGS,
     "supported() -> tuple of the instruction levels this CPU and OS can run (x86-64: baseline, v2, v3, v4), "
     "lowest first."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cpu",
                                    "Instruction levels of the compiled core, and those this CPU supports.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__cpu(void) {
  PyObject* m = PyModule_Create(&module);
  if (!m) return NULL;
  /* compiled: comma-separated list of the levels built, in build order */
  if (PyModule_AddStringConstant(m, "compiled", TWOLAYER_LEVELS) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
