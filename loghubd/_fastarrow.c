/* _fastarrow: serialized SLS LogGroups -> Arrow column buffers, without a Python object per
 * field. Optional accelerator of `loghubd.arrow.convert` (the map layout, which documents its
 * columns) and of `loghubd.arrow_view` (`Batch.arrow()`: one column per field, the schema of
 * docs/batch-views.md). Plain CPython C API, no Arrow headers: the output is byte strings laid
 * out as Arrow buffers (little-endian int64 values, int32 offsets, validity bitmaps, UTF-8
 * data), wrapped by pyarrow in Python.
 *
 * parse(groups: list, start: int, budget: int, allocate) -> (stop, fallback, rows, data, sections)
 *
 * The map layout. Converts groups[start:], one log group (a bytes-like object) at a time, and
 * stops after the group that brings the row count to `budget` or more, or at the end, or
 * BEFORE a group it will not convert (`fallback` true; `stop` is that group's index): a group
 * that is malformed, has a string that is not valid UTF-8, or would overflow an int32 offset.
 * Python converts such a group with the protobuf path, which escapes bad strings or raises for
 * malformed data. `rows`: the row count of each converted group; `data`: the block from
 * `allocate(size)` that holds every output buffer (see the enum below); `sections`: the
 * (start, size) of each.
 *
 * fields(raw, wanted, allocate) -> None | (rows, names, data, sections)
 *
 * The field columns. Converts a whole LogGroupList `raw` (bytes-like) into the fixed columns
 * (times, topic, source, tags: the first sections of the enum below) and one string column per
 * field, each as three sections (validity bitmap, empty when the column has no null; offsets;
 * data), `names` giving the fields in order of first appearance. `wanted`: None for every
 * field, or a list of str: only those fields, each a column even when no log has it. A field
 * repeated within one log keeps its last value. Runs without the GIL while it parses. None
 * when it does not take the batch (anything `parse` would leave to Python, in any group, or
 * more than MAX_COLUMNS fields): the caller then converts the whole batch in Python, which
 * escapes or raises exactly as before.
 *
 * Protobuf decoding mirrors upb (the runtime behind the Python path), proto2 schema:
 *   LogGroup { repeated Log Logs = 1; optional string Reserved = 2; optional string Topic = 3;
 *              optional string Source = 4; optional string MachineUUID = 5;
 *              repeated LogTag LogTags = 6; }
 *   Log      { required uint32 Time = 1; repeated Content Contents = 2;
 *              optional fixed32 Time_ns = 4; }
 *   Content, LogTag { required string Key = 1; required string Value = 2; }
 * The wire rules (shared with _fastlog.c and _fastjsonl.c) are in _wire.h; in short: required
 * fields are not enforced (missing = 0 / ""), the last occurrence of a singular field wins,
 * repeated fields keep their wire order, a known field with another wire type is skipped as
 * unknown, groups and malformed input go back to Python.
 * Anything this code is unsure about goes back to Python; what it accepts must decode exactly
 * as upb decodes it (tests/unit/test_fastarrow.py and test_arrow_view.py compare both on
 * random and broken data).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_wire.h" /* Span, Field, next_field, read_pair, is_utf8 */

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
    Buf tags; /* scratch: the current group's tags, as Span pairs */
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
    copy_short((uint8_t *)b->p + b->len, data, n); /* mostly short: no call into libc */
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

/* One string value: its bytes, then its end offset. */
static inline int put_str(Out *o, int off, Span v) {
    Buf *data = &o->b[off + 1];
    if (data->len > INT32_MAX || (size_t)v.n > (size_t)INT32_MAX - data->len) return FALLBACK;
    if (buf_put(data, v.p, (size_t)v.n) != OK) return NOMEM;
    return put_off(&o->b[off], data->len);
}

/* The tag of field `number` with wire type `wire`, as Field.tag holds it. */
#define TAG(number, wire) ((uint32_t)(number) << 3 | (uint32_t)(wire))

#define TRY(expr)                     \
    do {                              \
        int rc_ = (expr);             \
        if (rc_ != OK) return rc_;    \
    } while (0)

/* The Time and Time_ns of a Log, as the two int64 columns hold them. At most
 * (2^32 - 1) * 10^9 + 2^32 - 1 < 2^63: no overflow. */
static inline int put_times(Buf *us, Buf *ns, uint32_t time, uint32_t time_ns) {
    TRY(put_i64(us, (int64_t)time * 1000000 + time_ns / 1000));
    return put_i64(ns, (int64_t)time * 1000000000 + time_ns);
}

/* The columns every row of a group repeats: topic, source and the tags map entries. */
static int put_group_columns(Out *o, Span topic, Span source, const Span *tags, size_t ntags) {
    TRY(put_str(o, TOPIC_OFF, topic));
    TRY(put_str(o, SOURCE_OFF, source));
    for (size_t t = 0; t < ntags; t++) {
        TRY(put_str(o, TAG_K_OFF, tags[2 * t]));
        TRY(put_str(o, TAG_V_OFF, tags[2 * t + 1]));
    }
    return put_off(&o->b[TAG_OFF], entries(&o->b[TAG_K_OFF]));
}

/* One Log: a row. Contents go straight to the output; Time and Time_ns are known at its end. */
static int add_log(Out *o, Span msg, Span topic, Span source, const Span *tags, size_t ntags) {
    const uint8_t *p = msg.p, *end = msg.p + msg.n;
    uint32_t time = 0, time_ns = 0;
    Field f = {0};
    Span key, value;
    int r;
    while ((r = next_field(&p, end, &f)) > 0) {
        if (f.tag == TAG(1, 0)) {
            time = (uint32_t)f.v; /* uint32: the low 32 bits of the varint */
        } else if (f.tag == TAG(2, 2)) {
            if (read_pair(f.s, &key, &value) < 0) return FALLBACK;
            if (!is_utf8(key) || !is_utf8(value)) return FALLBACK;
            TRY(put_str(o, C_K_OFF, key));
            TRY(put_str(o, C_V_OFF, value));
        } else if (f.tag == TAG(4, 5)) {
            time_ns = (uint32_t)f.v;
        }
    }
    if (r < 0) return FALLBACK;
    TRY(put_times(&o->b[T_US], &o->b[T_NS], time, time_ns));
    TRY(put_off(&o->b[C_OFF], entries(&o->b[C_K_OFF])));
    return put_group_columns(o, topic, source, tags, ntags);
}

/* A group's topic, source and tags (checked), which may follow its Logs on the wire: the first
 * pass over a group. The tags go to o->tags as Span pairs. */
static int read_group_header(Out *o, Span group, Span *topic, Span *source) {
    const uint8_t *p = group.p, *end = group.p + group.n;
    Span pair[2];
    Field f = {0};
    int r;
    Ahead a = ahead_of(group);
    *topic = *source = EMPTY_SPAN;
    o->tags.len = 0;
    while ((r = next_field(&p, end, &f)) > 0) {
        ahead(&a, p);
        if (f.wt != 2) continue;
        if (f.num == 3) {
            *topic = f.s;
        } else if (f.num == 4) {
            *source = f.s;
        } else if (f.num == 6) {
            if (read_pair(f.s, &pair[0], &pair[1]) < 0) return FALLBACK;
            if (!is_utf8(pair[0]) || !is_utf8(pair[1])) return FALLBACK;
            TRY(buf_put(&o->tags, pair, sizeof pair));
        }
    }
    if (r < 0 || !is_utf8(*topic) || !is_utf8(*source)) return FALLBACK;
    return OK;
}

/* One LogGroup. Topic, Source and LogTags may follow the Logs on the wire, and every row
 * repeats them: a first pass collects (and checks) them, a second converts the Logs. */
static int add_group(Out *o, const uint8_t *data, size_t size, Py_ssize_t *rows) {
    Span group = {data, (Py_ssize_t)size}, topic, source, log;
    const uint8_t *p = data, *end = data + size;
    int r;
    TRY(read_group_header(o, group, &topic, &source));
    const Span *tags = (const Span *)(void *)o->tags.p;
    size_t ntags = o->tags.len / (2 * sizeof(Span));
    *rows = 0;
    while ((r = next_message(&p, end, 1, &log)) > 0) {
        TRY(add_log(o, log, topic, source, tags, ntags));
        *rows += 1;
    }
    return r < 0 ? FALLBACK : OK; /* cannot be malformed here: checked above */
}

/* ---- fields(): one column per field ----------------------------------------------------- */

#define NFIXED C_OFF       /* the fixed columns' buffers: T_US .. TAG_V_DATA */
#define MAX_COLUMNS 4096   /* more fields than this in one batch: left to Python */
#define HINTS 64           /* positions within a log whose last field is remembered */

typedef struct {
    Buf name; /* the field's name (UTF-8) */
    uint64_t hash;
    Buf valid, off, data; /* validity bitmap (once the column has a null), offsets, data */
    size_t rows;          /* rows the column holds so far, null or not */
    size_t nulls;
    int bitmap; /* `valid` is in use */
} Column;

typedef struct {
    Out out;      /* the fixed columns (its map buffers stay unused) */
    Column *cols; /* `ncols` in use; up to `capcols` keep their buffers for the next call */
    size_t ncols, capcols;
    uint32_t *index; /* open addressing by name: column + 1, 0 = free; `slots` a power of 2 */
    size_t slots;
    uint32_t hint[HINTS]; /* column + 1 of the field last seen at each position of a log */
    Buf rows;             /* Py_ssize_t per log group: its row count */
    int closed;           /* the fields were given: the others are skipped */
} Fields;

static inline uint64_t hash_bytes(Span s) { /* FNV-1a */
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < s.n; i++) h = (h ^ s.p[i]) * 1099511628211ULL;
    return h;
}

static inline int has_name(const Column *c, Span key) {
    Span name = {(const uint8_t *)c->name.p, (Py_ssize_t)c->name.len};
    return span_eq(name, key); /* short names: word compares, not a call to memcmp */
}

static int index_insert(Fields *s, size_t col) {
    if ((s->ncols + 1) * 2 > s->slots) { /* keep the table at most half full */
        size_t slots = s->slots ? s->slots * 2 : 64;
        uint32_t *index = calloc(slots, sizeof *index);
        if (index == NULL) return NOMEM;
        for (size_t c = 0; c < col; c++) {
            size_t i = s->cols[c].hash & (slots - 1);
            while (index[i]) i = (i + 1) & (slots - 1);
            index[i] = (uint32_t)c + 1;
        }
        free(s->index);
        s->index = index;
        s->slots = slots;
    }
    size_t i = s->cols[col].hash & (s->slots - 1);
    while (s->index[i]) i = (i + 1) & (s->slots - 1);
    s->index[i] = (uint32_t)col + 1;
    return OK;
}

static int add_column(Fields *s, Span name, uint64_t hash, long *col) {
    if (s->ncols >= MAX_COLUMNS) return FALLBACK;
    if (s->ncols == s->capcols) {
        size_t cap = s->capcols ? s->capcols * 2 : 16;
        Column *cols = realloc(s->cols, cap * sizeof *cols);
        if (cols == NULL) return NOMEM;
        memset(cols + s->capcols, 0, (cap - s->capcols) * sizeof *cols);
        s->cols = cols;
        s->capcols = cap;
    }
    Column *c = &s->cols[s->ncols];
    c->name.len = c->valid.len = c->off.len = c->data.len = 0;
    c->rows = c->nulls = 0;
    c->bitmap = 0;
    c->hash = hash;
    TRY(buf_put(&c->name, name.p, (size_t)name.n));
    TRY(put_off(&c->off, 0));
    TRY(index_insert(s, s->ncols));
    *col = (long)s->ncols++;
    return OK;
}

/* The column of field `key` (made if new), or -1 when the fields were given without it. */
static int find_column(Fields *s, Span key, long *col) {
    uint64_t hash = hash_bytes(key);
    if (s->slots) {
        for (size_t i = hash & (s->slots - 1); s->index[i]; i = (i + 1) & (s->slots - 1)) {
            Column *c = &s->cols[s->index[i] - 1];
            if (c->hash == hash && has_name(c, key)) {
                *col = (long)s->index[i] - 1;
                return OK;
            }
        }
    }
    if (s->closed) {
        *col = -1;
        return OK;
    }
    return add_column(s, key, hash, col);
}

/* The rows so far valid, from the first null on. */
static int bitmap_start(Column *c) {
    size_t full = c->rows / 8, bytes = (c->rows + 7) / 8;
    c->valid.len = 0;
    if (bytes == 0) return OK;
    if (c->valid.cap < bytes && buf_grow(&c->valid, bytes) != OK) return NOMEM;
    memset(c->valid.p, 0xFF, full);
    if (bytes > full) c->valid.p[full] = (char)((1u << (c->rows % 8)) - 1);
    c->valid.len = bytes;
    return OK;
}

static inline int bit_push(Column *c, int bit) {
    if (c->rows % 8 == 0) {
        char zero = 0;
        TRY(buf_put(&c->valid, &zero, 1));
    }
    if (bit) ((unsigned char *)c->valid.p)[c->rows / 8] |= (unsigned char)(1u << (c->rows % 8));
    return OK;
}

static int col_null(Column *c) {
    if (!c->bitmap) {
        TRY(bitmap_start(c));
        c->bitmap = 1;
    }
    TRY(bit_push(c, 0));
    TRY(put_off(&c->off, c->data.len));
    c->rows++;
    c->nulls++;
    return OK;
}

/* Row `row`'s value of the column; the rows before it that lack the field become nulls. */
static int col_value(Column *c, size_t row, Span v) {
    if (c->rows == row + 1) { /* the field repeats within this log: the last value wins */
        int32_t begin;
        memcpy(&begin, c->off.p + c->off.len - 2 * sizeof begin, sizeof begin);
        c->data.len = (size_t)begin;
        c->off.len -= sizeof begin;
    } else {
        while (c->rows < row) TRY(col_null(c));
        if (c->bitmap) TRY(bit_push(c, 1));
        c->rows++;
    }
    if (c->data.len > INT32_MAX || (size_t)v.n > (size_t)INT32_MAX - c->data.len) return FALLBACK;
    TRY(buf_put(&c->data, v.p, (size_t)v.n));
    return put_off(&c->off, c->data.len);
}

/* One Log: row `row` of the fixed columns and of the columns of its fields. */
static int fields_log(Fields *s, size_t row, Span msg, Span topic, Span source,
                      const Span *tags, size_t ntags) {
    const uint8_t *p = msg.p, *end = msg.p + msg.n;
    uint32_t time = 0, time_ns = 0;
    size_t k = 0; /* the position of the field within the log */
    Field f = {0};
    Span key, value;
    int r;
    while ((r = next_field(&p, end, &f)) > 0) {
        if (f.tag == TAG(1, 0)) {
            time = (uint32_t)f.v;
        } else if (f.tag == TAG(2, 2)) {
            long col;
            if (read_pair(f.s, &key, &value) < 0) return FALLBACK;
            /* Structured logs repeat their fields in the same order: try the column of the
             * field at this position in the previous log before the hash table. (A column's
             * name was checked to be UTF-8 when it was made.) */
            uint32_t hint = k < HINTS ? s->hint[k] : 0;
            if (hint && has_name(&s->cols[hint - 1], key)) {
                col = (long)hint - 1;
            } else {
                if (!is_utf8(key)) return FALLBACK;
                TRY(find_column(s, key, &col));
                if (k < HINTS) s->hint[k] = (uint32_t)(col + 1);
            }
            k++;
            if (col < 0) continue; /* not a field asked for */
            if (!is_utf8(value)) return FALLBACK;
            TRY(col_value(&s->cols[col], row, value));
        } else if (f.tag == TAG(4, 5)) {
            time_ns = (uint32_t)f.v;
        }
    }
    if (r < 0) return FALLBACK;
    TRY(put_times(&s->out.b[T_US], &s->out.b[T_NS], time, time_ns));
    return put_group_columns(&s->out, topic, source, tags, ntags);
}

/* The whole LogGroupList; then every column padded with nulls to the row count. */
static int fields_all(Fields *s, const uint8_t *data, size_t size) {
    const uint8_t *p = data, *end = data + size;
    size_t row = 0;
    Span group, log, topic, source;
    int r;
    while ((r = next_message(&p, end, 1, &group)) > 0) {
        const uint8_t *q = group.p, *group_end = group.p + group.n;
        Py_ssize_t n = 0;
        TRY(read_group_header(&s->out, group, &topic, &source));
        const Span *tags = (const Span *)(void *)s->out.tags.p;
        size_t ntags = s->out.tags.len / (2 * sizeof(Span));
        while ((r = next_message(&q, group_end, 1, &log)) > 0) {
            TRY(fields_log(s, row++, log, topic, source, tags, ntags));
            n++;
        }
        if (r < 0) return FALLBACK;
        TRY(buf_put(&s->rows, &n, sizeof n));
    }
    if (r < 0) return FALLBACK;
    for (size_t c = 0; c < s->ncols; c++)
        while (s->cols[c].rows < row) TRY(col_null(&s->cols[c]));
    return OK;
}

/* ---- the Python functions ------------------------------------------------------------ */

/* The scratch buffers of the previous call, kept for the next one: growing fresh buffers for
 * every chunk costs more (page faults, realloc copies) than the parsing. A call takes them and
 * gives them back, so a call that starts while another runs just allocates its own (Python
 * code can run inside a call: allocate(), the garbage collector; the GIL can change hands). */
static Out *spare;
static Fields *fields_spare;
#define SPARE_MAX ((size_t)64 << 20) /* do not keep more than this (bytes) */
#define ALIGN 64                     /* of every buffer within the output, as Arrow does */

static void out_free_buffers(Out *o) {
    for (int b = 0; b < NBUF; b++) free(o->b[b].p);
    free(o->tags.p);
}

static size_t out_capacity(const Out *o) {
    size_t kept = o->tags.cap;
    for (int b = 0; b < NBUF; b++) kept += o->b[b].cap;
    return kept;
}

static void out_release(Out *o) {
    if (spare == NULL && out_capacity(o) <= SPARE_MAX) {
        spare = o;
    } else {
        out_free_buffers(o);
        free(o);
    }
}

static void fields_release(Fields *s) {
    size_t kept = out_capacity(&s->out) + s->rows.cap + s->slots * sizeof *s->index;
    for (size_t c = 0; c < s->capcols; c++) {
        Column *col = &s->cols[c];
        kept += col->name.cap + col->valid.cap + col->off.cap + col->data.cap;
    }
    if (fields_spare == NULL && kept <= SPARE_MAX) {
        fields_spare = s;
        return;
    }
    out_free_buffers(&s->out);
    for (size_t c = 0; c < s->capcols; c++) {
        Column *col = &s->cols[c];
        free(col->name.p);
        free(col->valid.p);
        free(col->off.p);
        free(col->data.p);
    }
    free(s->cols);
    free(s->index);
    free(s->rows.p);
    free(s);
}

static int is_offsets(int b) {
    return b == TOPIC_OFF || b == SOURCE_OFF || b == TAG_OFF || b == TAG_K_OFF ||
           b == TAG_V_OFF || b == C_OFF || b == C_K_OFF || b == C_V_OFF;
}

/* Empty buffers, offsets starting with their 0. */
static int out_reset(Out *o) {
    for (int b = 0; b < NBUF; b++) {
        o->b[b].len = 0;
        if (is_offsets(b) && put_off(&o->b[b], 0) != OK) return NOMEM;
    }
    return OK;
}

/* Every buffer in one block from `allocate(size)` (a writable buffer, e.g. pyarrow's
 * allocate_buffer: Arrow's allocator reuses its memory, fresh memory costs page faults), each at
 * a multiple of ALIGN; and the (start, size) of each. */
static PyObject *output(const Buf *const *bufs, size_t count, PyObject *allocate,
                        PyObject **sections) {
    size_t size = 0;
    Py_buffer view;
    for (size_t b = 0; b < count; b++) {
        if (bufs[b]->len > (size_t)PY_SSIZE_T_MAX - size - ALIGN) return PyErr_NoMemory();
        size += (bufs[b]->len + ALIGN - 1) / ALIGN * ALIGN;
    }
    PyObject *block = PyObject_CallFunction(allocate, "n", (Py_ssize_t)size);
    if (block == NULL) return NULL;
    if (PyObject_GetBuffer(block, &view, PyBUF_WRITABLE) < 0) goto error;
    if ((size_t)view.len < size) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "allocate() returned a buffer too small");
        goto error;
    }
    *sections = PyTuple_New((Py_ssize_t)count);
    size_t at = 0;
    for (size_t b = 0; *sections != NULL && b < count; b++) {
        char *dst = (char *)view.buf + at;
        size_t len = bufs[b]->len, padded = (len + ALIGN - 1) / ALIGN * ALIGN;
        if (len) memcpy(dst, bufs[b]->p, len);
        memset(dst + len, 0, padded - len);
        PyObject *where = Py_BuildValue("(nn)", (Py_ssize_t)at, (Py_ssize_t)len);
        if (where == NULL) Py_CLEAR(*sections);
        else PyTuple_SET_ITEM(*sections, (Py_ssize_t)b, where);
        at += padded;
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
    if (out_reset(o) != OK) {
        PyErr_NoMemory();
        goto error;
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
    const Buf *bufs[NBUF];
    for (int b = 0; b < NBUF; b++) bufs[b] = &o->b[b];
    data = output(bufs, NBUF, allocate, &sections);
    if (data == NULL) goto error;
    out_release(o);
    return Py_BuildValue("(nONNN)", i, fallback ? Py_True : Py_False, rows, data, sections);
error:
    out_release(o);
    Py_XDECREF(rows);
    return NULL;
}

/* The fields asked for become the first columns, and the set is closed. 0, or -1 with an
 * exception set (a name that is not str), or 1 when a name cannot be UTF-8 (no field has it:
 * left to Python). */
static int want_fields(Fields *s, PyObject *wanted) {
    if (wanted == Py_None) return 0;
    if (!PyList_Check(wanted)) {
        PyErr_SetString(PyExc_TypeError, "fields: wanted must be a list of str or None");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(wanted); i++) {
        PyObject *name = PyList_GET_ITEM(wanted, i);
        Py_ssize_t n;
        long col;
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "fields: wanted must be a list of str or None");
            return -1;
        }
        const char *utf8 = PyUnicode_AsUTF8AndSize(name, &n);
        if (utf8 == NULL) {
            PyErr_Clear(); /* lone surrogates */
            return 1;
        }
        int rc = find_column(s, (Span){(const uint8_t *)utf8, n}, &col);
        if (rc == NOMEM) {
            PyErr_NoMemory();
            return -1;
        }
        if (rc == FALLBACK) return 1;
    }
    s->closed = 1;
    return 0;
}

static PyObject *fields(PyObject *self, PyObject *args) {
    PyObject *raw, *wanted, *allocate, *rows = NULL, *names = NULL, *nulls = NULL;
    PyObject *data = NULL, *sections = NULL;
    const Buf **bufs = NULL;
    static const Buf none = {NULL, 0, 0}; /* the bitmap of a column without nulls */
    Py_buffer view;
    int rc;
    Fields *s;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOO:fields", &raw, &wanted, &allocate)) return NULL;
    s = fields_spare;
    fields_spare = NULL;
    if (s == NULL && (s = calloc(1, sizeof *s)) == NULL) return PyErr_NoMemory();
    s->ncols = 0;
    s->closed = 0;
    s->rows.len = 0;
    memset(s->hint, 0, sizeof s->hint);
    if (s->slots) memset(s->index, 0, s->slots * sizeof *s->index);
    if (out_reset(&s->out) != OK) {
        PyErr_NoMemory();
        goto error;
    }
    rc = want_fields(s, wanted);
    if (rc < 0) goto error;
    if (rc > 0) goto fallback;
    if (PyObject_GetBuffer(raw, &view, PyBUF_SIMPLE) < 0) goto error;
    Py_BEGIN_ALLOW_THREADS
    rc = fields_all(s, (const uint8_t *)view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (rc == NOMEM) {
        PyErr_NoMemory();
        goto error;
    }
    if (rc == FALLBACK) goto fallback;

    size_t count = NFIXED + 3 * s->ncols, groups = s->rows.len / sizeof(Py_ssize_t);
    bufs = malloc(count * sizeof *bufs);
    rows = PyList_New((Py_ssize_t)groups);
    names = PyList_New((Py_ssize_t)s->ncols);
    nulls = PyList_New((Py_ssize_t)s->ncols);
    if (bufs == NULL || rows == NULL || names == NULL || nulls == NULL) {
        if (bufs == NULL) PyErr_NoMemory();
        goto error;
    }
    for (size_t g = 0; g < groups; g++) {
        Py_ssize_t n;
        memcpy(&n, s->rows.p + g * sizeof n, sizeof n);
        PyObject *item = PyLong_FromSsize_t(n);
        if (item == NULL) goto error;
        PyList_SET_ITEM(rows, (Py_ssize_t)g, item);
    }
    for (int b = 0; b < NFIXED; b++) bufs[b] = &s->out.b[b];
    for (size_t c = 0; c < s->ncols; c++) {
        Column *col = &s->cols[c];
        PyObject *name = PyUnicode_DecodeUTF8(col->name.p, (Py_ssize_t)col->name.len, "strict");
        if (name == NULL) goto error;
        PyList_SET_ITEM(names, (Py_ssize_t)c, name);
        PyObject *count_ = PyLong_FromSize_t(col->nulls);
        if (count_ == NULL) goto error;
        PyList_SET_ITEM(nulls, (Py_ssize_t)c, count_);
        bufs[NFIXED + 3 * c] = col->nulls ? &col->valid : &none;
        bufs[NFIXED + 3 * c + 1] = &col->off;
        bufs[NFIXED + 3 * c + 2] = &col->data;
    }
    data = output(bufs, count, allocate, &sections);
    if (data == NULL) goto error;
    free(bufs);
    fields_release(s);
    return Py_BuildValue("(NNNNN)", rows, names, nulls, data, sections);
fallback:
    fields_release(s);
    Py_RETURN_NONE;
error:
    free(bufs);
    fields_release(s);
    Py_XDECREF(rows);
    Py_XDECREF(names);
    Py_XDECREF(nulls);
    return NULL;
}

static PyMethodDef methods[] = {
    {"parse", parse, METH_VARARGS,
     "parse(groups, start, budget, allocate) -> (stop, fallback, rows, data, sections): log "
     "groups to Arrow buffers (see loghubd.arrow)."},
    {"fields", fields, METH_VARARGS,
     "fields(raw, wanted, allocate) -> None | (rows, names, nulls, data, sections): a "
     "LogGroupList to Arrow buffers, one column per field (see loghubd.arrow_view)."},
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
