/* _fastlz4: an SLS raw LZ4 block decoded straight into a new bytes object.
 *
 * python-lz4's lz4.block.decompress(data, uncompressed_size=n) decodes into a PyMem_Malloc'd
 * buffer and then copies that into a new bytes object: two fresh multi-MB allocations (and
 * their page faults) plus a memmove per pulled batch. Here the bytes object is allocated once,
 * at the declared raw size, and LZ4 writes into it.
 *
 * liblz4 is not linked nor vendored: the lz4 wheel's own extension (lz4.block._block) carries
 * LZ4_decompress_safe with default visibility. bind(path) looks the symbol up in that already
 * loaded library (dlopen with RTLD_NOLOAD, so nothing new is ever loaded) and says whether it
 * was found; decompress() refuses to run before a successful bind(). The caller
 * (loghubd/protocol/compress.py) takes the python-lz4 path when bind() says False.
 *
 * decompress() gives what the Python path gives: the same bytes, or ValueError / OverflowError
 * with python-lz4's texts. A block that decodes to fewer bytes than declared is returned
 * shortened, so the caller's size check words it as for the Python path. LZ4_decompress_safe
 * never writes beyond the capacity it is given (raw_size), whatever the input.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <limits.h>

typedef int (*lz4_decompress_safe_fn)(const char *src, char *dst, int src_size, int dst_capacity);

static lz4_decompress_safe_fn lz4_decompress_safe = NULL;

/* below this output size the decode takes less time than handing the GIL over and back */
#define RELEASE_GIL_FROM (64 * 1024)

PyDoc_STRVAR(bind_doc,
"bind(path, /)\n--\n\n"
"Find LZ4_decompress_safe in the shared library at `path`, which must already be loaded\n"
"(lz4.block._block.__file__): True if found (decompress() then uses it), False if the library\n"
"is not loaded or does not export it (the binding, if any, is then left as it was).");

static PyObject *
fastlz4_bind(PyObject *module, PyObject *arg)
{
    PyObject *encoded;
    void *handle, *symbol = NULL;

    if (!PyUnicode_FSConverter(arg, &encoded))
        return NULL;
    handle = dlopen(PyBytes_AS_STRING(encoded), RTLD_NOW | RTLD_NOLOAD);
    Py_DECREF(encoded);
    if (handle != NULL) {
        symbol = dlsym(handle, "LZ4_decompress_safe");
        /* the lz4 module holds its own reference: the code stays mapped after ours goes */
        dlclose(handle);
    }
    if (symbol == NULL)
        Py_RETURN_FALSE;
    lz4_decompress_safe = (lz4_decompress_safe_fn)symbol;
    Py_RETURN_TRUE;
}

PyDoc_STRVAR(decompress_doc,
"decompress(data, raw_size, /)\n--\n\n"
"The raw LZ4 block `data` decoded into a new bytes object of at most raw_size bytes (fewer if\n"
"the block ends sooner). ValueError when the block is corrupt or inflates beyond raw_size,\n"
"OverflowError when a size does not fit LZ4's int, RuntimeError before a successful bind().\n"
"The GIL is released while large blocks are decoded.");

static PyObject *
fastlz4_decompress(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t raw_size;
    PyObject *out = NULL;
    int decoded;

    if (!PyArg_ParseTuple(args, "y*n:decompress", &view, &raw_size))
        return NULL;
    if (lz4_decompress_safe == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "LZ4_decompress_safe is not bound: call bind()");
        goto done;
    }
    if (raw_size < 0) {
        PyErr_SetString(PyExc_ValueError, "raw_size must not be negative");
        goto done;
    }
    /* checked before anything is allocated, with python-lz4's words */
    if (raw_size > INT_MAX || view.len > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "signed integer is greater than maximum");
        goto done;
    }
    if ((out = PyBytes_FromStringAndSize(NULL, raw_size)) == NULL)
        goto done;
    if (raw_size >= RELEASE_GIL_FROM) {
        Py_BEGIN_ALLOW_THREADS
        decoded = lz4_decompress_safe((const char *)view.buf, PyBytes_AS_STRING(out),
                                      (int)view.len, (int)raw_size);
        Py_END_ALLOW_THREADS
    }
    else {
        decoded = lz4_decompress_safe((const char *)view.buf, PyBytes_AS_STRING(out),
                                      (int)view.len, (int)raw_size);
    }
    if (decoded < 0) {
        PyErr_Format(PyExc_ValueError,
                     "Decompression failed: corrupt input or insufficient space in destination "
                     "buffer. Error code: %d", -decoded);
        Py_CLEAR(out);
    }
    else if (decoded < raw_size)
        (void)_PyBytes_Resize(&out, decoded); /* on failure out is NULL with MemoryError set */
done:
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"bind", fastlz4_bind, METH_O, bind_doc},
    {"decompress", fastlz4_decompress, METH_VARARGS, decompress_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_fastlz4",
    .m_doc = "C decoder of SLS raw LZ4 blocks straight into bytes, with the lz4 wheel's own\n"
             "LZ4_decompress_safe (loghubd/protocol/compress.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__fastlz4(void)
{
    return PyModule_Create(&moduledef);
}
