// The Python module demo_ext._C: host code only. Importing it makes no CUDA call, so it imports
// on machines without a GPU or driver (the CUDA runtime is linked statically and loads the driver
// lazily, on the first call that needs it).
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "demo_ext.h"

static PyObject* device_count(PyObject*, PyObject*) {
  int count;
  Py_BEGIN_ALLOW_THREADS
  count = demo_ext_device_count();
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(count);
}

static PyObject* run(PyObject*, PyObject* args) {
  int n = 0;
  if (!PyArg_ParseTuple(args, "i", &n)) return nullptr;
  if (n < 0 || n > (1 << 24)) {
    PyErr_SetString(PyExc_ValueError, "n must be in [0, 2**24]");
    return nullptr;
  }
  unsigned long long total = 0;
  int cuda_arch = -1;
  char message[256] = {0};
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = demo_ext_run(n, &total, &cuda_arch, message, sizeof(message));
  Py_END_ALLOW_THREADS
  if (rc != 0) {
    PyErr_Format(PyExc_RuntimeError, "demo_ext: %s", message);
    return nullptr;
  }
  return Py_BuildValue("(iK)", cuda_arch, total);
}

static PyMethodDef methods[] = {
    {"device_count", device_count, METH_NOARGS, "Number of visible CUDA devices (0 without driver or GPU)."},
    {"run", run, METH_VARARGS,
     "run(n) -> (cuda_arch, sum of i*i for i < n): runs the kernels; cuda_arch is the __CUDA_ARCH__ "
     "of the image the driver picked."},
    {nullptr, nullptr, 0, nullptr},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "demo_ext._C", "demo_ext's CUDA kernels.", -1, methods};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
