/* _fastlog: LogHub LogGroupList wire bytes -> the flat record dicts of loghubd.models._flatten.
 *
 * An optional accelerator for Batch.logs(). It must return exactly what the Python path
 * (upb parse + _flatten) returns, or raise ValueError, in which case the caller runs the
 * Python path, which then decides (today's behaviour, including its quirks). So whenever
 * this decoder is unsure it refuses: it rejects everything upb rejects and a little more
 * (unknown groups, strings that are not UTF-8 where the Python path would hand out bytes).
 *
 * Schema (proto2, loghubd/protocol/pb.py):
 *   LogGroupList { repeated LogGroup LogGroups = 1; }
 *   LogGroup { repeated Log Logs = 1; optional string Reserved = 2; optional string Topic = 3;
 *              optional string Source = 4; optional string MachineUUID = 5;
 *              repeated LogTag LogTags = 6; }
 *   Log { required uint32 Time = 1; repeated Content Contents = 2; optional fixed32 Time_ns = 4; }
 *   Content, LogTag { required string Key = 1; required string Value = 2; }
 *
 * Every read is bounded by the end of the enclosing message; all pointers stay inside the
 * caller's buffer, which is held (PyObject_GetBuffer) for the whole call.
 *
 * count_logs() (for Batch.log_count) walks the same fields with the same helpers and counts
 * the records decode() would make, without making them: it accepts exactly what decode()
 * accepts, so its count is len(decode(raw)) or it raises ValueError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_wire.h"  /* Span, next_field, next_message, read_pair, is_utf8 */

/* Fields are told apart by f.tag, not f.num and f.wt (see Field in _wire.h). */
#define TAG WIRE_TAG

/* Keys of every record, created once. */
static PyObject *s_time, *s_time_ns, *s_topic, *s_source, *s_tag_prefix, *s_empty;

static int
malformed(void)
{
    PyErr_SetString(PyExc_ValueError, "malformed LogGroupList");
    return -1;
}

/* A string object and the bytes it was decoded from (which live in the caller's buffer). */
typedef struct {
    PyObject *obj;
    Span s;
} Slot;

/* `s` as a str, decoded with `errors`: NULL (strict) for keys, topics and sources (where they
 * are not UTF-8 the Python path gets bytes from upb, and we raise UnicodeDecodeError, a
 * ValueError), "surrogateescape" for values. Keys, and many values (levels, methods, status
 * codes, hosts), repeat from log to log, so the slot's object is reused when its bytes are
 * the same (allocation, hashing and freeing are most of the cost of a short str). Returns a
 * borrowed reference, owned by the slot. */

static PyObject *
cached_str(Slot *slot, Span s, const char *errors)
{
    if (slot->obj != NULL && span_eq(slot->s, s))
        return slot->obj;
    PyObject *str = PyUnicode_DecodeUTF8((const char *)s.p, s.n, errors);
    if (str == NULL)
        return NULL;
    Py_XSETREF(slot->obj, str);
    slot->s = s;
    return str;
}

/* The key and the value of the content at one position of a log, as in the previous log. */
typedef struct {
    Slot key, value;
} Pair;

typedef struct {
    PyObject *out; /* the list of records */
    Pair *pairs;   /* by position in the log */
    Py_ssize_t npairs;
    Slot topic, source;
    uint32_t time; /* the last __time__ object, reused while the value repeats */
    PyObject *time_obj;
    /* The previous record of the same group, as a template: a log with the same number of
     * contents, the same keys in the same order and a Time_ns as present starts as a copy of
     * it and has its values replaced, which is cheaper than inserting every key into a fresh
     * dict (no slot search, no index to fill). Cleared at each group: its __topic__,
     * __source__ and tags are the group's. A key that differs is only found while copying,
     * and logs of alternating shapes would pay for a copy each (up to 55 % more): after
     * three failed tries in a row, 16, then 32, 64 ... logs do not try (`skip_for`). */
    PyObject *tmpl;
    Py_ssize_t tmpl_n;
    int tmpl_ns;
    /* The template's keys are all distinct (no content key repeats another or a key of the
     * group's or __time__): then a value whose object is the template's at that position is
     * already in the copy, and is not stored again (a lookup and two reference counts). */
    int tmpl_exact;
    unsigned fails; /* tries in a row that found another key */
    unsigned skip;  /* logs of the template's size that will not try */
} State;

/* Logs that do not try the template after `fails` failed tries in a row: none after one or
 * two (one log of another shape among many fails twice: as itself, then as the template),
 * then 16, 32, ... up to 1024. */
static unsigned
skip_for(unsigned fails)
{
    return fails <= 2 ? 0 : 16u << (fails - 3 < 6 ? fails - 3 : 6);
}

static Pair *
pair_at(State *st, Py_ssize_t i)
{
    if (i >= st->npairs) {
        Py_ssize_t n = st->npairs ? st->npairs * 2 : 16;
        while (n <= i)
            n *= 2;
        Pair *pairs = PyMem_Realloc(st->pairs, (size_t)n * sizeof(Pair));
        if (pairs == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        memset(pairs + st->npairs, 0, (size_t)(n - st->npairs) * sizeof(Pair));
        st->pairs = pairs;
        st->npairs = n;
    }
    return &st->pairs[i];
}

/* A dict sized for `n` keys: growing one from empty to ~15 keys resizes it twice, which
 * costs ~20% of the decoding time. The presized dict has CPython's general key layout
 * (24-byte entries, not 16): ~170 bytes more per record of 13 keys. _PyDict_NewPresized is
 * CPython-internal API, exported up to 3.12 at least; later versions grow the dict. */
static PyObject *
new_dict(Py_ssize_t n)
{
#if PY_VERSION_HEX < 0x030D0000
    return _PyDict_NewPresized(n);
#else
    (void)n;
    return PyDict_New();
#endif
}

/* __time__ (reusing the previous object while the value repeats) and, when not 0,
 * __time_ns__ of `rec`. With `as_template` (`rec` a copy of an exact template), a repeated
 * __time__ is already there. */
static int
set_times(State *st, PyObject *rec, uint32_t time, uint32_t time_ns, int as_template)
{
    int repeated = st->time_obj != NULL && st->time == time;
    if (!repeated) {
        PyObject *t = PyLong_FromUnsignedLong(time);
        if (t == NULL)
            return -1;
        Py_XSETREF(st->time_obj, t);
        st->time = time;
    }
    /* A copy of the template already holds it: the template's __time__ was set from
     * st->time_obj, which only changes with the value. */
    if (!(as_template && repeated) && PyDict_SetItem(rec, s_time, st->time_obj) < 0)
        return -1;
    if (time_ns) {
        PyObject *t = PyLong_FromUnsignedLong(time_ns);
        if (t == NULL)
            return -1;
        int rc = PyDict_SetItem(rec, s_time_ns, t);
        Py_DECREF(t);
        return rc;
    }
    return 0;
}

/* The contents of Log `msg` into `rec`, in order; a key seen before overwrites (plain dict
 * semantics). With `as_template`, `rec` is a copy of the template and each key must be the
 * one the template has at its position: returns 0 at the first that is not (the slots then
 * hold the new keys, for the caller's fresh build). Returns 1 when done, -1 with an
 * exception. */
static int
set_contents(State *st, PyObject *rec, Span msg, int as_template)
{
    const uint8_t *p = msg.p, *end = msg.p + msg.n;
    Span content;
    Py_ssize_t i = 0;
    while (next_message(&p, end, 2, &content) > 0) {
        Span k, v;
        Pair *pair;
        PyObject *key, *value, *was, *was_value;
        if (read_pair(content, &k, &v) < 0)
            return malformed();
        if ((pair = pair_at(st, i++)) == NULL)
            return -1;
        was = pair->key.obj;
        if ((key = cached_str(&pair->key, k, NULL)) == NULL)
            return -1;
        if (as_template && key != was)
            return 0;
        /* Values: what the Python path yields after its Raw-schema fallback. */
        was_value = pair->value.obj;
        if ((value = cached_str(&pair->value, v, "surrogateescape")) == NULL)
            return -1;
        if (as_template && value == was_value && st->tmpl_exact)
            continue; /* the template's value at this position: the copy holds it */
        if (PyDict_SetItem(rec, key, value) < 0)
            return -1;
    }
    return 1;
}

/* `rec` (a new reference, stolen) appended to st->out, and kept as the template. */
static int
append_record(State *st, PyObject *rec)
{
    if (PyList_Append(st->out, rec) < 0) {
        Py_DECREF(rec);
        return -1;
    }
    Py_XSETREF(st->tmpl, rec); /* the list holds its own reference */
    return 0;
}

/* One Log -> one record appended to st->out. `base` holds __topic__, __source__ and the
 * tags, in that order. */
static int
decode_log(State *st, PyObject *base, Span msg)
{
    const uint8_t *p, *end = msg.p + msg.n;
    Field f = {0}; /* f.v is set wherever it is read (wire types 0, 5); gcc cannot tell */
    int r;
    uint32_t time = 0, time_ns = 0;
    PyObject *rec;
    Py_ssize_t ncontents = 0;

    /* Pass 1: Time and Time_ns (last occurrence wins) must be the record's first keys,
     * yet Time_ns (field 4) follows the contents on the wire. */
    p = msg.p;
    while ((r = next_field(&p, end, &f)) > 0) {
        if (f.tag == TAG(1, 0))
            time = (uint32_t)f.v; /* uint32: the low 32 bits of the varint */
        else if (f.tag == TAG(4, 5))
            time_ns = (uint32_t)f.v;
        else if (f.tag == TAG(2, 2))
            ncontents++;
    }
    if (r < 0)
        return malformed();

    /* Shaped like the previous record of the group: a copy of it, its values replaced. */
    int try_template = st->tmpl != NULL && st->tmpl_n == ncontents && st->tmpl_ns == (time_ns != 0);
    if (try_template && st->skip > 0) {
        st->skip--;
        try_template = 0;
    }
    if (try_template) {
        if ((rec = PyDict_Copy(st->tmpl)) == NULL)
            return -1;
        if (set_times(st, rec, time, time_ns, st->tmpl_exact) < 0 ||
            (r = set_contents(st, rec, msg, 1)) < 0) {
            Py_DECREF(rec);
            return -1;
        }
        if (r > 0) {
            st->fails = 0;
            return append_record(st, rec);
        }
        Py_DECREF(rec); /* another key somewhere: built afresh below */
        st->skip = skip_for(++st->fails);
    }

    /* The first record of a group is the template of those after it, which are copies of it
     * and have its layout: grown from empty, its keys table has CPython's layout for str keys
     * (16-byte entries; 13 keys in 416 bytes, which pymalloc serves, and lookups that compare
     * str keys only), where a presized one has the general layout (24-byte entries; 584
     * bytes, past pymalloc's 512, so every copy's table is a malloc and a free). Growing
     * costs two resizes, once a group. A record built afresh mid-group (another shape) is
     * presized: with shapes that keep changing, most records are built so. */
    rec = st->tmpl == NULL ? PyDict_New() : new_dict(2 + PyDict_GET_SIZE(base) + ncontents);
    if (rec == NULL)
        return -1;
    if (set_times(st, rec, time, time_ns, 0) < 0 || PyDict_Update(rec, base) < 0 ||
        set_contents(st, rec, msg, 0) < 0) {
        Py_DECREF(rec);
        return -1;
    }
    st->tmpl_n = ncontents;
    st->tmpl_ns = time_ns != 0;
    st->tmpl_exact =
        PyDict_GET_SIZE(rec) == 1 + (time_ns != 0) + PyDict_GET_SIZE(base) + ncontents;
    return append_record(st, rec);
}

static int
decode_group(State *st, Span msg)
{
    const uint8_t *p, *end = msg.p + msg.n;
    Field f;
    int r;
    Span topic = EMPTY_SPAN, source = EMPTY_SPAN, log;
    PyObject *base, *obj;

    /* Pass 1: Topic and Source (last occurrence wins, wherever it is) and the tags in order.
     * The base dict gets placeholders first so that its order is topic, source, tags. */
    base = PyDict_New();
    if (base == NULL || PyDict_SetItem(base, s_topic, s_empty) < 0 ||
        PyDict_SetItem(base, s_source, s_empty) < 0)
        goto error;
    p = msg.p;
    Ahead a = ahead_of(msg);
    while ((r = next_field(&p, end, &f)) > 0) {
        ahead(&a, p);
        if (f.tag == TAG(3, 2)) {
            topic = f.s;
        }
        else if (f.tag == TAG(4, 2)) {
            source = f.s;
        }
        else if (f.tag == TAG(6, 2)) {
            Span k, v;
            PyObject *key, *value;
            int rc;
            if (read_pair(f.s, &k, &v) < 0) {
                malformed();
                goto error;
            }
            if ((obj = PyUnicode_DecodeUTF8((const char *)k.p, k.n, NULL)) == NULL)
                goto error;
            key = PyUnicode_Concat(s_tag_prefix, obj);
            Py_DECREF(obj);
            if (key == NULL)
                goto error;
            if ((value = PyUnicode_DecodeUTF8((const char *)v.p, v.n, NULL)) == NULL) {
                Py_DECREF(key);
                goto error;
            }
            rc = PyDict_SetItem(base, key, value);
            Py_DECREF(key);
            Py_DECREF(value);
            if (rc < 0)
                goto error;
        }
        /* 1 (Logs): pass 2. 2 (Reserved), 5 (MachineUUID): never read, never checked. */
    }
    if (r < 0) {
        malformed();
        goto error;
    }
    if ((obj = cached_str(&st->topic, topic, NULL)) == NULL ||
        PyDict_SetItem(base, s_topic, obj) < 0)
        goto error;
    if ((obj = cached_str(&st->source, source, NULL)) == NULL ||
        PyDict_SetItem(base, s_source, obj) < 0)
        goto error;

    /* Pass 2: the logs (the framing was checked by pass 1). */
    Py_CLEAR(st->tmpl);
    st->fails = st->skip = 0;
    p = msg.p;
    while (next_message(&p, end, 1, &log) > 0) {
        if (decode_log(st, base, log) < 0)
            goto error;
    }
    Py_DECREF(base);
    return 0;
error:
    Py_XDECREF(base);
    return -1;
}

/* The LogGroups of the LogGroupList `buf[0:len)` that start at byte `offset` (the start of a
 * top-level field): whole groups until at least `max_logs` records were made (no limit if
 * negative) or the end is reached. Sets *next to the byte after the last field read (`len` at
 * the end). Returns a new list, or NULL with an exception set. The key objects are reused
 * from log to log within one call. */
static PyObject *
decode_range(const uint8_t *buf, Py_ssize_t len, Py_ssize_t offset, Py_ssize_t max_logs,
             Py_ssize_t *next)
{
    State st;
    Span group;
    int r;
    const uint8_t *p = buf + offset, *end = buf + len;

    memset(&st, 0, sizeof st);
    st.out = PyList_New(0);
    if (st.out == NULL)
        return NULL;
    while ((r = next_message(&p, end, 1, &group)) > 0) {
        if (decode_group(&st, group) < 0) {
            Py_CLEAR(st.out);
            goto done;
        }
        if (max_logs >= 0 && PyList_GET_SIZE(st.out) >= max_logs)
            break;
    }
    if (r < 0) {
        malformed();
        Py_CLEAR(st.out);
    }
    *next = p - buf;
done:
    for (Py_ssize_t i = 0; i < st.npairs; i++) {
        Py_XDECREF(st.pairs[i].key.obj);
        Py_XDECREF(st.pairs[i].value.obj);
    }
    PyMem_Free(st.pairs);
    Py_XDECREF(st.topic.obj);
    Py_XDECREF(st.source.obj);
    Py_XDECREF(st.time_obj);
    Py_XDECREF(st.tmpl);
    return st.out;
}

/* -- Counting -----------------------------------------------------------------------------
 * Batch.log_count only needs the number of records, but that number must be decode()'s or
 * nothing: so the walk below is decode_group/decode_log's, with what decoding checks by the
 * way made explicit (the framing of every Log, Content and LogTag; strict UTF-8 wherever
 * decode() makes a str that way), and no Python object is made. */

static int
not_utf8(void)
{
    PyErr_SetString(PyExc_ValueError,
                    "LogGroupList with a key, tag, topic or source that is not UTF-8");
    return -1;
}

/* The content keys of the previous log by position (the first COUNT_KEYS), already found to
 * be UTF-8: a key with the same bytes is not checked again. */
#define COUNT_KEYS 32
typedef struct {
    Span keys[COUNT_KEYS];
} Checked;

/* What decode_log refuses in a Log: bad framing of the Log or of a Content, or a Content Key
 * (the last one) that is not UTF-8. Values are never refused: decode() makes them with
 * surrogateescape. */
static int
check_log(Span msg, Checked *seen)
{
    const uint8_t *p = msg.p, *end = msg.p + msg.n;
    Span content, k, v;
    int r;
    size_t i = 0;
    while ((r = next_message(&p, end, 2, &content)) > 0) {
        if (read_pair(content, &k, &v) < 0)
            return malformed();
        if (i < COUNT_KEYS && seen->keys[i].p != NULL && span_eq(seen->keys[i], k)) {
            i++;
            continue;
        }
        if (!is_utf8(k))
            return not_utf8();
        if (i < COUNT_KEYS)
            seen->keys[i] = k; /* in the caller's buffer, alive for the whole call */
        i++;
    }
    return r < 0 ? malformed() : 0;
}

/* What decode_group refuses in a LogGroup, its logs included; adds its logs to *count. */
static int
count_group(Span msg, Py_ssize_t *count, Checked *seen)
{
    const uint8_t *p = msg.p, *end = msg.p + msg.n;
    Field f;
    int r;
    Span topic = EMPTY_SPAN, source = EMPTY_SPAN, k, v;
    Ahead a = ahead_of(msg);

    while ((r = next_field(&p, end, &f)) > 0) {
        ahead(&a, p);
        if (f.tag == TAG(1, 2)) {
            if (check_log(f.s, seen) < 0)
                return -1;
            (*count)++;
        }
        else if (f.tag == TAG(3, 2)) {
            topic = f.s;
        }
        else if (f.tag == TAG(4, 2)) {
            source = f.s;
        }
        else if (f.tag == TAG(6, 2)) {
            if (read_pair(f.s, &k, &v) < 0)
                return malformed();
            if (!is_utf8(k) || !is_utf8(v))
                return not_utf8();
        }
    }
    if (r < 0)
        return malformed();
    /* only the last Topic and Source become strs: earlier ones are never decoded */
    if (!is_utf8(topic) || !is_utf8(source))
        return not_utf8();
    return 0;
}

/* The number of records decode() would make of the LogGroupList [p, end), or -1 with
 * ValueError set where decode() would raise. */
static Py_ssize_t
count_list(const uint8_t *p, const uint8_t *end)
{
    Span group;
    Py_ssize_t count = 0;
    Checked seen;
    int r;
    memset(&seen, 0, sizeof seen);
    while ((r = next_message(&p, end, 1, &group)) > 0) {
        if (count_group(group, &count, &seen) < 0)
            return -1;
    }
    return r < 0 ? malformed() : count;
}

PyDoc_STRVAR(decode_doc,
"decode(raw, /)\n--\n\n"
"The records of a serialized LogGroupList, as list(loghubd.models._flatten(...)) builds them.\n"
"Raises ValueError when the bytes are malformed or a key, tag or topic/source is not UTF-8\n"
"(the caller then takes the Python path).");

static PyObject *
fastlog_decode(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    Py_ssize_t next;
    PyObject *out;

    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    out = decode_range((const uint8_t *)view.buf, view.len, 0, -1, &next);
    PyBuffer_Release(&view);
    return out;
}

PyDoc_STRVAR(decode_chunk_doc,
"decode_chunk(raw, offset, max_logs, /)\n--\n\n"
"Part of decode(raw): the records of the whole LogGroups from byte `offset` on (0, or an\n"
"offset this function returned for the same bytes), until at least `max_logs` (> 0) records\n"
"were made or the end is reached. Returns (records, next offset); the offset is len(raw) at\n"
"the end. Raises ValueError as decode() does (for the part it reads), and for an offset\n"
"outside [0, len(raw)] or a max_logs below 1.");

static PyObject *
fastlog_decode_chunk(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t offset, max_logs, next = 0;
    PyObject *out, *result = NULL;

    if (!PyArg_ParseTuple(args, "y*nn:decode_chunk", &view, &offset, &max_logs))
        return NULL;
    if (offset < 0 || offset > view.len)
        PyErr_Format(PyExc_ValueError, "offset %zd outside [0, %zd]", offset, view.len);
    else if (max_logs < 1)
        PyErr_Format(PyExc_ValueError, "max_logs must be positive, not %zd", max_logs);
    else if ((out = decode_range((const uint8_t *)view.buf, view.len, offset, max_logs,
                                 &next)) != NULL)
        result = Py_BuildValue("(Nn)", out, next);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(count_logs_doc,
"count_logs(raw, /)\n--\n\n"
"len(decode(raw)), without making the records: the number of Logs in all the LogGroups of a\n"
"serialized LogGroupList. Raises ValueError exactly where decode() would (the caller then\n"
"takes the Python path).");

static PyObject *
fastlog_count_logs(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    Py_ssize_t count;

    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    count = count_list((const uint8_t *)view.buf, (const uint8_t *)view.buf + view.len);
    PyBuffer_Release(&view);
    return count < 0 ? NULL : PyLong_FromSsize_t(count);
}

static PyMethodDef methods[] = {
    {"decode", fastlog_decode, METH_O, decode_doc},
    {"decode_chunk", fastlog_decode_chunk, METH_VARARGS, decode_chunk_doc},
    {"count_logs", fastlog_count_logs, METH_O, count_logs_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_fastlog",
    .m_doc = "C decoder of LogGroupList bytes into Batch.logs() records, and their counter for\n"
             "Batch.log_count (loghubd/models.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__fastlog(void)
{
    if (s_empty == NULL) { /* once per process */
        if ((s_time = PyUnicode_InternFromString("__time__")) == NULL ||
            (s_time_ns = PyUnicode_InternFromString("__time_ns_part__")) == NULL ||
            (s_topic = PyUnicode_InternFromString("__topic__")) == NULL ||
            (s_source = PyUnicode_InternFromString("__source__")) == NULL ||
            (s_tag_prefix = PyUnicode_InternFromString("__tag__:")) == NULL ||
            (s_empty = PyUnicode_FromStringAndSize("", 0)) == NULL)
            return NULL;
    }
    return PyModule_Create(&moduledef);
}
