#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyMethodDef methods[] = {{nullptr, nullptr, 0, nullptr}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "shard_ext._C", nullptr, -1, methods};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
