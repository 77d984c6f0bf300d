#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyMethodDef methods[] = {{nullptr, nullptr, 0, nullptr}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "pointnet2_like._ext", nullptr, -1, methods};

PyMODINIT_FUNC PyInit__ext(void) { return PyModule_Create(&module); }
