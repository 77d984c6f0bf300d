#define PY_SSIZE_T_CLEAN
#include <Python.h>

extern "C" int pathnvcc_ext_device_count(void);

static PyObject* device_count(PyObject*, PyObject*) { return PyLong_FromLong(pathnvcc_ext_device_count()); }

static PyMethodDef methods[] = {{"device_count", device_count, METH_NOARGS, "visible CUDA devices"},
                                {nullptr, nullptr, 0, nullptr}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "pathnvcc_ext._C", nullptr, -1, methods};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
