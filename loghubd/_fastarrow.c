/* _fastarrow: serialized SLS LogGroups -> Arrow column buffers, without a Python object per
 * field. Optional accelerator of `loghubd.arrow.convert` (which documents the columns);
 * plain CPython C API, no Arrow headers: the output is byte strings laid out as Arrow buffers
 * (little-endian int64 values, int32 offsets, UTF-8 data), wrapped by pyarrow in Python.
 *
 * parse(groups: list, start: int, budget: int, allocate) -> (stop, fallback, rows, data, sections)
 *
 * Converts groups[start:], one log group (a bytes-like object) at a time, and stops after the
 * group that brings the row count to `budget` or more, or at the end, or BEFORE a group it
 * will not convert (`fallback` true; `stop` is that group's index): a group that is malformed,
 * has a string that is not valid UTF-8, or would overflow an int32 offset. Python converts such
 * a group with the protobuf path, which escapes bad strings or raises for malformed data.
 * `rows`: the row count of each converted group; `data`: the block from `allocate(size)` that
 * holds every output buffer (see the enum below); `sections`: the (start, size) of each.
 *
 * Protobuf decoding mirrors upb (the runtime behind the Python path), proto2 schema:
 *   LogGroup { repeated Log Logs = 1; optional string Reserved = 2; optional string Topic = 3;
 *              optional string Source = 4; optional string MachineUUID = 5;
 *              repeated LogTag LogTags = 6; }
 *   Log      { required uint32 Time = 1; repeated Content Contents = 2;
 *              optional fixed32 Time_ns = 4; }
 *   Content, LogTag { required string Key = 1; required string Value = 2; }
 * - required fields are not enforced (upb does not check them either): missing = 0 / "";
 * - the last occurrence of a singular field wins; repeated fields keep their wire order;
 * - a known field with another wire type than its own is an unknown field: skipped;
 * - unknown fields are skipped by wire type 0, 1, 2 or 5. Groups (3, 4) are legal but rare:
 *   left to the Python path, like every malformed input (wire types 6 and 7, field number 0,
 *   truncated data, varints over 10 bytes, tags over 5 bytes or 32 bits, lengths >= 2^31).
 * Anything this code is unsure about goes back to Python; what it accepts must decode exactly
 * as upb decodes it (tests/test_spark_fastarrow.py compares both on random and broken data).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable byte buffers ------------------------------------------------------------ */

typedef struct {
    char *p;
    size_t len, cap;
} Buf;

/* The output buffers, in the order they are returned. Offsets buffers start with a 0. */
enum {
    T_US,      /* int64 per row: __time__ (µs) */
    T_NS,      /* int64 per row: __time_ns__ */
    TOPIC_OFF, /* int32 per row + 1 */
    TOPIC_DATA,
    SOURCE_OFF,
    SOURCE_DATA,
    TAG_OFF, /* int32 per row + 1: the row's first entry in the tag keys/values */
    TAG_K_OFF,
    TAG_K_DATA,
    TAG_V_OFF,
    TAG_V_DATA,
    C_OFF, /* int32 per row + 1: the row's first entry in the content keys/values */
    C_K_OFF,
    C_K_DATA,
    C_V_OFF,
    C_V_DATA,
    NBUF
};

typedef struct {
    Buf b[NBUF];
    Buf tags; /* scratch: the current group's tags, as Str pairs */
} Out;

/* Result of the per-group functions. */
enum { OK = 0, FALLBACK = 1, NOMEM = 2 };

static int buf_grow(Buf *b, size_t extra) {
    size_t cap = b->cap ? b->cap : 1024;
    while (cap - b->len < extra) {
        if (cap > SIZE_MAX / 2) return NOMEM;
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (p == NULL) return NOMEM;
    b->p = p;
    b->cap = cap;
    return OK;
}

static inline int buf_put(Buf *b, const void *data, size_t n) {
    if (n == 0) return OK;
    if (b->cap - b->len < n && buf_grow(b, n) != OK) return NOMEM;
    memcpy(b->p + b->len, data, n);
    b->len += n;
    return OK;
}

static inline int put_i64(Buf *b, int64_t v) { return buf_put(b, &v, sizeof v); }

/* An int32 offset: `n` must fit (Arrow's string and map offsets are int32). */
static inline int put_off(Buf *b, size_t n) {
    if (n > INT32_MAX) return FALLBACK;
    int32_t v = (int32_t)n;
    return buf_put(b, &v, sizeof v);
}

/* Number of entries (offsets minus the leading 0) of an offsets buffer. */
static size_t entries(const Buf *off) { return off->len / sizeof(int32_t) - 1; }

/* ---- protobuf wire format --------------------------------------------------------------- */

typedef struct {
    const uint8_t *s;
    size_t n;
} Str;

/* A base-128 varint as upb reads it: at most 10 bytes; bits past the 64th are dropped. */
static const uint8_t *read_varint(const uint8_t *p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end) return NULL;
        uint8_t byte = *p++;
        v |= (uint64_t)(byte & 0x7F) << (7 * i); /* 7 * 9 = 63: shifts stay below 64 */
        if (byte < 0x80) {
            *out = v;
            return p;
        }
    }
    return NULL;
}

/* The tag of field `number` with wire type `wire`. */
#define TAG(number, wire) ((uint32_t)(number) << 3 | (uint32_t)(wire))

typedef struct {
    uint64_t value; /* wire type 0: the varint; 5: the little-endian 32-bit value */
    Str bytes;      /* wire type 2 */
} Field;

/* Reads the field at *pp (which must be < end) and moves *pp past it. Returns its tag, or 0
 * if it is malformed (or a group, see the top). */
static inline uint32_t next_field(const uint8_t **pp, const uint8_t *end, Field *f) {
    const uint8_t *p = *pp;
    uint64_t tag, n;
    const uint8_t *q = read_varint(p, end, &tag);
    /* upb: a tag is at most 5 bytes and 32 bits; field number 0 is an error. */
    if (q == NULL || q - p > 5 || tag > UINT32_MAX || (tag >> 3) == 0) return 0;
    switch (tag & 7) {
        case 0:
            q = read_varint(q, end, &f->value);
            if (q == NULL) return 0;
            break;
        case 1:
            if (end - q < 8) return 0;
            q += 8;
            break;
        case 2:
            q = read_varint(q, end, &n);
            /* upb rejects sizes >= INT32_MAX even when the data is there. */
            if (q == NULL || n >= INT32_MAX || n > (uint64_t)(end - q)) return 0;
            f->bytes.s = q;
            f->bytes.n = (size_t)n;
            q += n;
            break;
        case 5:
            if (end - q < 4) return 0;
            f->value = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
                       (uint32_t)q[3] << 24;
            q += 4;
            break;
        default: /* 3, 4: groups (left to Python); 6, 7: invalid */
            return 0;
    }
    *pp = q;
    return (uint32_t)tag;
}

/* Key = 1 and Value = 2 of a Content or LogTag message (last occurrence wins). */
static int parse_pair(Str msg, Str *key, Str *value) {
    const uint8_t *p = msg.s, *end = msg.s + msg.n;
    Field f;
    key->s = value->s = msg.s;
    key->n = value->n = 0;
    while (p < end) {
        uint32_t tag = next_field(&p, end, &f);
        if (tag == 0) return -1;
        if (tag == TAG(1, 2)) *key = f.bytes;
        if (tag == TAG(2, 2)) *value = f.bytes;
    }
    return 0;
}

/* Strict UTF-8, as Python's decoder and Arrow define it: no overlong forms, no surrogates,
 * nothing above U+10FFFF. */
static inline int utf8_ok(Str str) {
    const uint8_t *s = str.s;
    size_t n = str.n, i = 0;
    while (i < n) {
        if (n - i >= 8) { /* ASCII fast path */
            uint64_t w;
            memcpy(&w, s + i, 8);
            if ((w & 0x8080808080808080ULL) == 0) {
                i += 8;
                continue;
            }
        }
        uint8_t c = s[i];
        if (c < 0x80) {
            i += 1;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (n - i < 2 || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (n - i < 3 || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && s[i + 1] < 0xA0) return 0; /* overlong */
            if (c == 0xED && s[i + 1] > 0x9F) return 0; /* surrogate */
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (n - i < 4 || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 ||
                (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if (c == 0xF0 && s[i + 1] < 0x90) return 0; /* overlong */
            if (c == 0xF4 && s[i + 1] > 0x8F) return 0; /* above U+10FFFF */
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

/* One string value: its bytes, then its end offset. */
static inline int put_str(Out *o, int off, Str v) {
    Buf *data = &o->b[off + 1];
    if (data->len > INT32_MAX || v.n > (size_t)INT32_MAX - data->len) return FALLBACK;
    if (buf_put(data, v.s, v.n) != OK) return NOMEM;
    return put_off(&o->b[off], data->len);
}

#define TRY(expr)                     \
    do {                              \
        int rc_ = (expr);             \
        if (rc_ != OK) return rc_;    \
    } while (0)

/* One Log: a row. Contents go straight to the output; Time and Time_ns are known at its end. */
static int add_log(Out *o, Str msg, Str topic, Str source, const Str *tags, size_t ntags) {
    const uint8_t *p = msg.s, *end = msg.s + msg.n;
    uint32_t time = 0, time_ns = 0;
    Field f;
    Str key, value;
    while (p < end) {
        uint32_t tag = next_field(&p, end, &f);
        if (tag == 0) return FALLBACK;
        if (tag == TAG(1, 0)) {
            time = (uint32_t)f.value; /* uint32: the low 32 bits of the varint */
        } else if (tag == TAG(2, 2)) {
            if (parse_pair(f.bytes, &key, &value) < 0) return FALLBACK;
            if (!utf8_ok(key) || !utf8_ok(value)) return FALLBACK;
            TRY(put_str(o, C_K_OFF, key));
            TRY(put_str(o, C_V_OFF, value));
        } else if (tag == TAG(4, 5)) {
            time_ns = (uint32_t)f.value;
        }
    }
    /* At most (2^32 - 1) * 10^9 + 2^32 - 1 < 2^63: no overflow. */
    TRY(put_i64(&o->b[T_US], (int64_t)time * 1000000 + time_ns / 1000));
    TRY(put_i64(&o->b[T_NS], (int64_t)time * 1000000000 + time_ns));
    TRY(put_off(&o->b[C_OFF], entries(&o->b[C_K_OFF])));
    TRY(put_str(o, TOPIC_OFF, topic));
    TRY(put_str(o, SOURCE_OFF, source));
    for (size_t t = 0; t < ntags; t++) {
        TRY(put_str(o, TAG_K_OFF, tags[2 * t]));
        TRY(put_str(o, TAG_V_OFF, tags[2 * t + 1]));
    }
    return put_off(&o->b[TAG_OFF], entries(&o->b[TAG_K_OFF]));
}

/* One LogGroup. Topic, Source and LogTags may follow the Logs on the wire, and every row
 * repeats them: a first pass collects (and checks) them, a second converts the Logs. */
static int add_group(Out *o, const uint8_t *data, size_t size, Py_ssize_t *rows) {
    const uint8_t *p = data, *end = data + size;
    Str topic = {data, 0}, source = {data, 0}, pair[2];
    Field f;
    o->tags.len = 0;
    while (p < end) {
        uint32_t tag = next_field(&p, end, &f);
        if (tag == 0) return FALLBACK;
        if (tag == TAG(3, 2)) {
            topic = f.bytes;
        } else if (tag == TAG(4, 2)) {
            source = f.bytes;
        } else if (tag == TAG(6, 2)) {
            if (parse_pair(f.bytes, &pair[0], &pair[1]) < 0) return FALLBACK;
            if (!utf8_ok(pair[0]) || !utf8_ok(pair[1])) return FALLBACK;
            TRY(buf_put(&o->tags, pair, sizeof pair));
        }
    }
    if (!utf8_ok(topic) || !utf8_ok(source)) return FALLBACK;
    const Str *tags = (const Str *)(void *)o->tags.p;
    size_t ntags = o->tags.len / sizeof pair;
    *rows = 0;
    for (p = data; p < end;) {
        uint32_t tag = next_field(&p, end, &f);
        if (tag == 0) return FALLBACK; /* cannot happen: checked above */
        if (tag == TAG(1, 2)) {
            TRY(add_log(o, f.bytes, topic, source, tags, ntags));
            *rows += 1;
        }
    }
    return OK;
}

/* ---- the Python function ------------------------------------------------------------- */

/* The scratch buffers of the previous call, kept for the next one: growing fresh buffers for
 * every chunk costs more (page faults, realloc copies) than the parsing. A call takes them and
 * gives them back, so a call that starts while another runs just allocates its own (Python
 * code can run inside a call: allocate(), the garbage collector; the GIL can change hands). */
static Out *spare;
#define SPARE_MAX ((size_t)64 << 20) /* do not keep more than this (bytes) */
#define ALIGN 64                     /* of every buffer within the output, as Arrow does */

static void out_free(Out *o) {
    if (o == NULL) return;
    for (int b = 0; b < NBUF; b++) free(o->b[b].p);
    free(o->tags.p);
    free(o);
}

static void out_release(Out *o) {
    size_t kept = o->tags.cap;
    for (int b = 0; b < NBUF; b++) kept += o->b[b].cap;
    if (spare == NULL && kept <= SPARE_MAX) {
        spare = o;
    } else {
        out_free(o);
    }
}

static int is_offsets(int b) {
    return b == TOPIC_OFF || b == SOURCE_OFF || b == TAG_OFF || b == TAG_K_OFF ||
           b == TAG_V_OFF || b == C_OFF || b == C_K_OFF || b == C_V_OFF;
}

/* Every buffer in one block from `allocate(size)` (a writable buffer, e.g. pyarrow's
 * allocate_buffer: Arrow's allocator reuses its memory, fresh memory costs page faults), each at
 * a multiple of ALIGN; and the (start, size) of each. */
static PyObject *output(const Out *o, PyObject *allocate, PyObject **sections) {
    size_t at[NBUF], size = 0;
    Py_buffer view;
    for (int b = 0; b < NBUF; b++) {
        at[b] = size;
        if (o->b[b].len > (size_t)PY_SSIZE_T_MAX - size - ALIGN) return PyErr_NoMemory();
        size += (o->b[b].len + ALIGN - 1) / ALIGN * ALIGN;
    }
    PyObject *block = PyObject_CallFunction(allocate, "n", (Py_ssize_t)size);
    if (block == NULL) return NULL;
    if (PyObject_GetBuffer(block, &view, PyBUF_WRITABLE) < 0) goto error;
    if ((size_t)view.len < size) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "allocate() returned a buffer too small");
        goto error;
    }
    *sections = PyTuple_New(NBUF);
    for (int b = 0; *sections != NULL && b < NBUF; b++) {
        char *dst = (char *)view.buf + at[b];
        size_t len = o->b[b].len, padded = (len + ALIGN - 1) / ALIGN * ALIGN;
        if (len) memcpy(dst, o->b[b].p, len);
        memset(dst + len, 0, padded - len);
        PyObject *where = Py_BuildValue("(nn)", (Py_ssize_t)at[b], (Py_ssize_t)len);
        if (where == NULL) Py_CLEAR(*sections);
        else PyTuple_SET_ITEM(*sections, b, where);
    }
    PyBuffer_Release(&view);
    if (*sections == NULL) goto error;
    return block;
error:
    Py_DECREF(block);
    return NULL;
}

static PyObject *parse(PyObject *self, PyObject *args) {
    PyObject *groups, *allocate, *rows = NULL, *data = NULL, *sections = NULL;
    Py_ssize_t start, budget, total = 0, i;
    int fallback = 0;
    Out *o;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!nnO:parse", &PyList_Type, &groups, &start, &budget,
                          &allocate))
        return NULL;
    o = spare; /* after the arguments: their conversion can run Python code */
    spare = NULL;
    if (o == NULL && (o = calloc(1, sizeof *o)) == NULL) return PyErr_NoMemory();
    for (int b = 0; b < NBUF; b++) {
        o->b[b].len = 0;
        if (is_offsets(b) && put_off(&o->b[b], 0) != OK) {
            PyErr_NoMemory();
            goto error;
        }
    }
    rows = PyList_New(0);
    if (rows == NULL) goto error;
    for (i = start < 0 ? 0 : start; i < PyList_GET_SIZE(groups);) {
        PyObject *group = PyList_GET_ITEM(groups, i);
        Py_buffer view;
        size_t mark[NBUF];
        Py_ssize_t n = 0;
        Py_INCREF(group);
        int rc = PyObject_GetBuffer(group, &view, PyBUF_SIMPLE);
        Py_DECREF(group);
        if (rc < 0) goto error;
        for (int b = 0; b < NBUF; b++) mark[b] = o->b[b].len;
        rc = add_group(o, (const uint8_t *)view.buf, (size_t)view.len, &n);
        PyBuffer_Release(&view);
        if (rc == NOMEM) {
            PyErr_NoMemory();
            goto error;
        }
        if (rc == FALLBACK) { /* drop what the group wrote; Python converts it */
            for (int b = 0; b < NBUF; b++) o->b[b].len = mark[b];
            fallback = 1;
            break;
        }
        PyObject *count = PyLong_FromSsize_t(n);
        if (count == NULL) goto error;
        rc = PyList_Append(rows, count);
        Py_DECREF(count);
        if (rc < 0) goto error;
        total += n;
        i++;
        if (total >= budget) break; /* a budget <= 0: one group per call, as in Python */
    }
    data = output(o, allocate, &sections);
    if (data == NULL) goto error;
    out_release(o);
    return Py_BuildValue("(nONNN)", i, fallback ? Py_True : Py_False, rows, data, sections);
error:
    out_release(o);
    Py_XDECREF(rows);
    return NULL;
}

static PyMethodDef methods[] = {
    {"parse", parse, METH_VARARGS,
     "parse(groups, start, budget, allocate) -> (stop, fallback, rows, data, sections): log "
     "groups to Arrow buffers (see loghubd.arrow)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_fastarrow",
    .m_doc = "Serialized SLS LogGroups -> Arrow buffers.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__fastarrow(void) { return PyModule_Create(&module); }
