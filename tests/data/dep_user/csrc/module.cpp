#define PY_SSIZE_T_CLEAN
#include <Python.h>

extern "C" int dep_user_built_against(void);

static PyObject* built_against(PyObject*, PyObject*) { return PyLong_FromLong(dep_user_built_against()); }

static PyMethodDef methods[] = {{"built_against", built_against, METH_NOARGS, "demo_ext's version, as digits"},
                                {nullptr, nullptr, 0, nullptr}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dep_user._C", nullptr, -1, methods};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
