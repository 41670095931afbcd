/* _fastjsonl: LogHub LogGroupList wire bytes -> JSON lines, without a Python object per log.
 *
 * An optional accelerator of Batch.jsonl() (loghubd/models.py). Its output must be
 * byte-identical to the Python twin, `json.dumps(record) + "\n"` for each record of
 * Batch.logs() (default separators ", " and ": ", ensure_ascii: every character above U+007F
 * as a lowercase \uXXXX escape, astral ones as a surrogate pair, values that are not UTF-8
 * kept with surrogateescape, so each such byte b appears as \udcXX with XX = b). Where it is
 * unsure it raises ValueError and the caller takes the Python path, which then decides: it
 * accepts exactly what loghubd._fastlog accepts (malformed bytes, and keys, tags, topics or
 * sources that are not UTF-8, are refused).
 *
 * The record of a log is, in order: __time__, __time_ns_part__ (when not 0), __topic__,
 * __source__, "__tag__:" + each tag key, then the contents; a key seen before keeps its
 * place and takes the later value (plain dict semantics). The wire schema and the protobuf
 * rules (last occurrence of a singular field wins, unknown fields skipped, groups refused)
 * are loghubd/_fastlog.c's, whose helpers live in _wire.h.
 *
 * Structured logs repeat their keys in the same order: a log whose keys are the previous
 * log's (already checked: UTF-8, distinct, none of the record's own) and whose Time comes
 * first is written in one pass (encode_log_fast); any other takes encode_log, which parses
 * the log first and builds the record where a key repeats or shadows one of the record's.
 *
 * The encoding runs without the GIL, in a malloc'd buffer; the caller's buffer is held
 * (PyObject_GetBuffer) for the whole call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "_wire.h"

/* Fields are told apart by f.tag, not f.num and f.wt (see Field in _wire.h). */
#define TAG WIRE_TAG

/* ---- output buffer ----------------------------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t len, cap;
} Out;

/* Room for `extra` more bytes: 0, or -1 when out of memory. */
static int grow(Out *o, size_t extra);

static inline int
reserve(Out *o, size_t extra)
{
    return o->cap - o->len >= extra ? 0 : grow(o, extra);
}

static int
grow(Out *o, size_t extra)
{
    size_t cap = o->cap ? o->cap : 4096;
    while (cap - o->len < extra) {
        if (cap > SIZE_MAX / 2)
            return -1;
        cap *= 2;
    }
    uint8_t *p = realloc(o->p, cap);
    if (p == NULL)
        return -1;
    o->p = p;
    o->cap = cap;
    return 0;
}

static inline void
put(Out *o, const char *s, size_t n)
{
    copy_short(o->p + o->len, (const uint8_t *)s, n);
    o->len += n;
}

#define PUT_LIT(o, lit) put((o), (lit), sizeof(lit) - 1)

static const char HEX[] = "0123456789abcdef";

static inline void
put_u16_escape(Out *o, unsigned cp)
{
    uint8_t *q = o->p + o->len;
    q[0] = '\\';
    q[1] = 'u';
    q[2] = (uint8_t)HEX[(cp >> 12) & 15];
    q[3] = (uint8_t)HEX[(cp >> 8) & 15];
    q[4] = (uint8_t)HEX[(cp >> 4) & 15];
    q[5] = (uint8_t)HEX[cp & 15];
    o->len += 6;
}

/* 1 for the ASCII bytes json.dumps writes as they are. */
static uint8_t PLAIN[256];

static void
init_tables(void)
{
    for (int c = 0x20; c < 0x80; c++)
        PLAIN[c] = 1;
    PLAIN['"'] = PLAIN['\\'] = PLAIN[0x7f] = 0; /* json.dumps escapes DEL too */
}

/* Whether any of the 8 bytes at p is not PLAIN (SWAR: 0x80 of a byte is set in `hit` when
 * that byte is < 0x20, '"', '\\', 0x7f or >= 0x80). */
static inline int
needs_escape_word(uint64_t w)
{
    const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
    uint64_t hit;
#define HAS_ZERO(x) (((x) - ones) & ~(x) & highs)
    hit = (w - ones * 0x20) & ~w;         /* bytes < 0x20 (and some >= 0x80: caught below) */
    hit |= HAS_ZERO(w ^ (ones * '"')) | HAS_ZERO(w ^ (ones * '\\')) | HAS_ZERO(w ^ (ones * 0x7f));
    hit |= w;                             /* bytes >= 0x80 */
#undef HAS_ZERO
    return (hit & highs) != 0;
}

static inline int
needs_escape8(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return needs_escape_word(w);
}

/* Whether any of the n (<= 16) bytes at p is not PLAIN, with at most two word loads, none
 * outside [p, p + n): the short values of structured logs (levels, codes, ids) in a few
 * instructions instead of a loop per byte. */
static inline int
needs_escape_short(const uint8_t *p, size_t n)
{
    if (n >= 8) {
        uint64_t a, b;
        memcpy(&a, p, 8);
        memcpy(&b, p + n - 8, 8);
        return needs_escape_word(a) || needs_escape_word(b);
    }
    uint64_t w = 0x6161616161616161u; /* 'a' where there is no byte of the string */
    if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + n - 4, 4);
        w = (uint64_t)a | (uint64_t)b << 32;
    }
    else if (n > 0) {
        w = (w & ~(uint64_t)0xffffff) | p[0] | (uint64_t)p[n >> 1] << 8 | (uint64_t)p[n - 1] << 16;
    }
    return needs_escape_word(w);
}

/* The length of the well-formed UTF-8 sequence at p (2..4 bytes, with its code point in
 * *cp), or 0 if the bytes there are not one (overlong, surrogate, above U+10FFFF, cut off):
 * exactly what CPython's strict decoder accepts. */
static inline int
utf8_seq(const uint8_t *p, const uint8_t *end, unsigned *cp)
{
    uint8_t b = p[0], lo = 0x80, hi = 0xbf;
    int more;
    if (b >= 0xc2 && b <= 0xdf) {
        more = 1;
    }
    else if (b >= 0xe0 && b <= 0xef) {
        more = 2;
        if (b == 0xe0)
            lo = 0xa0;
        else if (b == 0xed)
            hi = 0x9f;
    }
    else if (b >= 0xf0 && b <= 0xf4) {
        more = 3;
        if (b == 0xf0)
            lo = 0x90;
        else if (b == 0xf4)
            hi = 0x8f;
    }
    else {
        return 0;
    }
    if (end - p <= more || p[1] < lo || p[1] > hi)
        return 0;
    unsigned v = b & (0x3f >> more);
    for (int i = 1; i <= more; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        v = v << 6 | (p[i] & 0x3f);
    }
    *cp = v;
    return more + 1;
}

#if defined(__GNUC__) || defined(__clang__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE
#endif

/* put_string for any string: words of plain bytes at a time, escapes one by one. */
static NOINLINE int
put_string_any(Out *o, Span s)
{
    const uint8_t *p = s.p, *end = s.p + s.n;
    /* worst case: 6 output bytes per input byte, plus the quotes */
    if ((size_t)s.n > (SIZE_MAX - 2) / 6 || reserve(o, (size_t)s.n * 6 + 2) < 0)
        return -1;
    o->p[o->len++] = '"';
    while (p < end) {
        const uint8_t *run = p;
        while (end - p >= 8 && !needs_escape8(p))
            p += 8;
        /* the last 1..7 bytes, when the loop above ran out of words (not when it stopped at
         * a byte to escape), in one word that ends at `end`: it takes in bytes before p too,
         * so an escaped one there sends this to the loop below */
        if (p < end && end - p < 8 && s.n >= 8 && !needs_escape8(end - 8))
            p = end;
        while (p < end && PLAIN[*p])
            p++;
        if (p > run) {
            copy_short(o->p + o->len, run, (size_t)(p - run));
            o->len += (size_t)(p - run);
        }
        if (p == end)
            break;
        uint8_t b = *p;
        if (b < 0x80) {
            o->p[o->len++] = '\\';
            switch (b) {
            case '"': o->p[o->len++] = '"'; break;
            case '\\': o->p[o->len++] = '\\'; break;
            case '\n': o->p[o->len++] = 'n'; break;
            case '\r': o->p[o->len++] = 'r'; break;
            case '\t': o->p[o->len++] = 't'; break;
            case '\b': o->p[o->len++] = 'b'; break;
            case '\f': o->p[o->len++] = 'f'; break;
            default:
                o->len--; /* the backslash is part of the \u escape */
                put_u16_escape(o, b);
            }
            p++;
            continue;
        }
        unsigned cp;
        int n = utf8_seq(p, end, &cp);
        if (n == 0) { /* surrogateescape: the byte becomes U+DC80..U+DCFF */
            put_u16_escape(o, 0xdc00u + b);
            p++;
        }
        else if (cp >= 0x10000) {
            cp -= 0x10000;
            put_u16_escape(o, 0xd800u | (cp >> 10));
            put_u16_escape(o, 0xdc00u | (cp & 0x3ff));
            p += n;
        }
        else {
            put_u16_escape(o, cp);
            p += n;
        }
    }
    o->p[o->len++] = '"';
    return 0;
}

/* `s` as a JSON string (quotes included), as json.dumps(s.decode("utf-8",
 * "surrogateescape")) writes it. -1 when out of memory. Inlined for what most values of most
 * logs are, up to 16 bytes with nothing to escape; put_string_any for the rest. */
static inline int
put_string(Out *o, Span s)
{
    size_t n = (size_t)s.n;
    if (n <= 16 && !needs_escape_short(s.p, n)) {
        if (reserve(o, 18) < 0)
            return -1;
        uint8_t *q = o->p + o->len;
        q[0] = '"';
        copy_short(q + 1, s.p, n);
        q[n + 1] = '"';
        o->len += n + 2;
        return 0;
    }
    return put_string_any(o, s);
}

/* The decimal digits of v, at the end of `digits`; their number is returned. */
static inline size_t
u32_digits(uint32_t v, uint8_t digits[10])
{
    size_t n = 0;
    do {
        digits[9 - n++] = (uint8_t)('0' + v % 10);
        v /= 10;
    } while (v);
    return n;
}

static int
put_uint(Out *o, uint32_t v)
{
    uint8_t digits[10];
    size_t n = u32_digits(v, digits);
    if (reserve(o, 10) < 0)
        return -1;
    /* memcpy, not put(): gcc -O1 would warn of copy_short's long case (never taken here) */
    memcpy(o->p + o->len, digits + 10 - n, n);
    o->len += n;
    return 0;
}

/* ---- records ----------------------------------------------------------------------------- */

/* One key of a record and its value: a number (__time__, __time_ns_part__) or a string. */
typedef struct {
    Span key;
    Span value;
    int is_num;
    uint32_t num;
    int cached; /* a content key equal to the key cached at its position (see KeyCache) */
} Entry;

typedef struct {
    Entry *p;
    size_t len, cap;
} Entries;

static int
entries_add(Entries *e, Entry x)
{
    if (e->len == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 32;
        Entry *p = realloc(e->p, cap * sizeof(Entry));
        if (p == NULL)
            return -1;
        e->p = p;
        e->cap = cap;
    }
    e->p[e->len++] = x;
    return 0;
}

/* Add `x` with dict semantics: an existing key takes the new value in its place. */
static int
entries_set(Entries *e, Entry x)
{
    for (size_t i = 0; i < e->len; i++) {
        if (span_eq(e->p[i].key, x.key)) {
            e->p[i].value = x.value;
            e->p[i].is_num = x.is_num;
            e->p[i].num = x.num;
            return 0;
        }
    }
    return entries_add(e, x);
}

static const uint8_t K_TIME[] = "__time__", K_NS[] = "__time_ns_part__",
                     K_TOPIC[] = "__topic__", K_SOURCE[] = "__source__";
#define LIT_SPAN(a) ((Span){(a), (Py_ssize_t)sizeof(a) - 1})

/* Why the call fails, for the caller to raise once the GIL is back (E_SLOW never leaves
 * encode_group: encode_log_fast's "not this log", which encode_log then takes). */
enum { OK = 0, E_NOMEM, E_MALFORMED, E_NOT_UTF8, E_SLOW };

/* `, "key": ` of the content at one position in the previous log, to reuse when the next
 * log has the same key there (structured logs repeat their keys in the same order). */
typedef struct {
    Span key;
    Out text;
} KeyCache;

typedef struct {
    Out out;
    KeyCache *keys;
    size_t nkeys;
    size_t clean;     /* the first `clean` cached keys are distinct and none may shadow */
    Entries base;     /* __topic__, __source__, tags of the current group */
    Entries rec;      /* the record being built (slow path) */
    Entries contents; /* the contents of the current log */
    Out tag_keys;     /* "__tag__:" + key of each tag of the current group */
    Out fragment;     /* `"__topic__": ..., "__source__": ..., tags` of the current group */
    uint32_t time;    /* the last __time__ written, and its digits (logs share seconds) */
    uint8_t time_text[10];
    size_t time_len;  /* 0 until the first */
    Py_ssize_t logs;
} State;

/* A JSON object entry `"key": value` with its leading ", " unless first. */
static int
put_entry(Out *o, const Entry *x, int first)
{
    if (reserve(o, 4) < 0)
        return -1;
    if (!first)
        PUT_LIT(o, ", ");
    if (put_string(o, x->key) < 0 || reserve(o, 2) < 0)
        return -1;
    PUT_LIT(o, ": ");
    return x->is_num ? put_uint(o, x->num) : put_string(o, x->value);
}

/* Whether a content key may be one of the record's own keys (they all start with "__"). */
static inline int
may_shadow(Span k)
{
    return k.n >= 8 && k.p[0] == '_' && k.p[1] == '_';
}

/* Content i of the current log as `, "key": "value"`, its key's text from the cache. */
static int
put_content(State *st, size_t i)
{
    const Entry *x = &st->contents.p[i];
    if (i >= st->nkeys) {
        size_t n = st->nkeys ? st->nkeys * 2 : 16;
        while (n <= i)
            n *= 2;
        KeyCache *keys = realloc(st->keys, n * sizeof(KeyCache));
        if (keys == NULL)
            return -1;
        memset(keys + st->nkeys, 0, (n - st->nkeys) * sizeof(KeyCache));
        st->keys = keys;
        st->nkeys = n;
    }
    KeyCache *c = &st->keys[i];
    if (!x->cached) {
        c->text.len = 0;
        if (reserve(&c->text, 2) < 0)
            return -1;
        PUT_LIT(&c->text, ", ");
        if (put_string(&c->text, x->key) < 0 || reserve(&c->text, 2) < 0)
            return -1;
        PUT_LIT(&c->text, ": ");
        c->key = x->key; /* in the caller's buffer, alive for the whole call */
    }
    if (reserve(&st->out, c->text.len) < 0)
        return -1;
    put(&st->out, (const char *)c->text.p, c->text.len);
    return put_string(&st->out, x->value);
}

/* Keep the decimal digits of `t` (as put_uint writes them) for put_time. u32_digits's loop,
 * written out: gcc unrolls it here, and calling u32_digits cost ~3 % of views_bench's
 * encoding, whose logs each have a new __time__ (ext_ab, 41 pairs). */
static NOINLINE void
time_digits(State *st, uint32_t t)
{
    uint8_t tmp[10];
    size_t n = 0;
    uint32_t v = t;
    do {
        tmp[9 - n++] = (uint8_t)('0' + v % 10);
        v /= 10;
    } while (v);
    memcpy(st->time_text, tmp + 10 - n, n);
    st->time_len = n;
    st->time = t;
}

/* `t` in decimal; the digits are kept for the next log's (logs share seconds). */
static inline int
put_time(State *st, uint32_t t)
{
    if (st->time_len == 0 || t != st->time)
        time_digits(st, t);
    if (reserve(&st->out, sizeof st->time_text) < 0)
        return -1;
    /* all of time_text (room was reserved): a copy of fixed size, only time_len of it kept */
    memcpy(st->out.p + st->out.len, st->time_text, sizeof st->time_text);
    st->out.len += st->time_len;
    return 0;
}

/* The usual log in one pass, straight into the output: its Time comes first (and once), and
 * its keys are the cached ones at their positions, among the first `clean` (so distinct and
 * none a key of the record's own, which is what encode_log checks for). OK; E_SLOW with
 * nothing of the log left in the output when the log is not that (encode_log decides); or
 * E_NOMEM. */
static int
encode_log_fast(State *st, Span msg)
{
    const uint8_t *p = msg.p, *end = msg.p + msg.n;
    Out *o = &st->out;
    size_t start = o->len, time_end, i = 0;
    uint32_t time_ns = 0;
    Field f = {0};
    int r;

    if (st->clean == 0 || msg.n == 0 || p[0] != TAG(1, 0) || next_field(&p, end, &f) <= 0)
        return E_SLOW;
    if (reserve(o, 24) < 0)
        return E_NOMEM;
    PUT_LIT(o, "{\"__time__\": ");
    if (put_time(st, (uint32_t)f.v) < 0 || reserve(o, st->fragment.len + 2) < 0)
        return E_NOMEM;
    time_end = o->len;
    PUT_LIT(o, ", ");
    put(o, (const char *)st->fragment.p, st->fragment.len);
    while ((r = next_field(&p, end, &f)) > 0) {
        if (f.tag == TAG(2, 2)) {
            Span k, v;
            if (i >= st->clean || read_pair(f.s, &k, &v) < 0 || !span_eq(st->keys[i].key, k))
                goto slow;
            const Out *text = &st->keys[i++].text;
            if (reserve(o, text->len) < 0)
                return E_NOMEM;
            put(o, (const char *)text->p, text->len);
            if (put_string(o, v) < 0)
                return E_NOMEM;
        }
        else if (f.tag == TAG(4, 5))
            time_ns = (uint32_t)f.v;
        else if (f.tag == TAG(1, 0))
            goto slow; /* a second Time: the last one wins, and it was written already */
    }
    if (r < 0)
        goto slow;
    if (time_ns) { /* after the contents on the wire, before them in the record */
        static const char lit[] = ", \"__time_ns_part__\": ";
        const size_t k = sizeof lit - 1;
        uint8_t digits[10];
        size_t nd = u32_digits(time_ns, digits);
        if (reserve(o, k + nd) < 0)
            return E_NOMEM;
        uint8_t *at = o->p + time_end;
        memmove(at + k + nd, at, o->len - time_end);
        memcpy(at, lit, k);
        memcpy(at + k, digits + 10 - nd, nd);
        o->len += k + nd;
    }
    if (reserve(o, 2) < 0)
        return E_NOMEM;
    PUT_LIT(o, "}\n");
    st->logs++;
    return OK;
slow:
    o->len = start;
    return E_SLOW;
}

static int
encode_log(State *st, Span msg)
{
    const uint8_t *p = msg.p, *end = msg.p + msg.n;
    Field f = {0};
    Span content;
    uint32_t time = 0, time_ns = 0;
    int r, collide = 0, all_cached = 1;

    st->contents.len = 0;
    while ((r = next_field(&p, end, &f)) > 0) {
        if (f.tag == TAG(1, 0))
            time = (uint32_t)f.v;
        else if (f.tag == TAG(4, 5))
            time_ns = (uint32_t)f.v;
        else if (f.tag == TAG(2, 2)) {
            Entry x = {0};
            content = f.s;
            size_t i = st->contents.len;
            if (read_pair(content, &x.key, &x.value) < 0)
                return E_MALFORMED;
            /* A key equal to the cached one at its position was checked in an earlier log. */
            x.cached = i < st->nkeys && st->keys[i].text.len && span_eq(st->keys[i].key, x.key);
            if (!x.cached) {
                all_cached = 0;
                if (!is_utf8(x.key))
                    return E_NOT_UTF8;
            }
            if (entries_add(&st->contents, x) < 0)
                return E_NOMEM;
        }
    }
    if (r < 0)
        return E_MALFORMED;
    /* The keys of the previous logs again (and no more than were found distinct): they are
     * still distinct. Otherwise look for a repeat or a key of the record's own. */
    if (!all_cached || st->contents.len > st->clean) {
        for (size_t i = 0; i < st->contents.len && !collide; i++) {
            Span k = st->contents.p[i].key;
            collide = may_shadow(k);
            for (size_t j = 0; j < i && !collide; j++)
                collide = span_eq(st->contents.p[j].key, k);
        }
    }

    Out *o = &st->out;
    if (!collide) { /* the usual case: every key is new, the group's part is ready-made */
        if (reserve(o, 64 + st->fragment.len) < 0)
            return E_NOMEM;
        PUT_LIT(o, "{\"__time__\": ");
        if (put_time(st, time) < 0)
            return E_NOMEM;
        if (time_ns) {
            if (reserve(o, 24) < 0)
                return E_NOMEM;
            PUT_LIT(o, ", \"__time_ns_part__\": ");
            if (put_uint(o, time_ns) < 0)
                return E_NOMEM;
        }
        if (reserve(o, st->fragment.len + 2) < 0)
            return E_NOMEM;
        PUT_LIT(o, ", ");
        put(o, (const char *)st->fragment.p, st->fragment.len);
        for (size_t i = 0; i < st->contents.len; i++)
            if (put_content(st, i) < 0)
                return E_NOMEM;
        /* the cache now holds this log's keys, distinct: with the keys after them too if
         * they are the same as before */
        if (!all_cached || st->contents.len > st->clean)
            st->clean = st->contents.len;
    }
    else { /* a key repeats or shadows one of the record's own: build the record */
        Entry t = {LIT_SPAN(K_TIME), EMPTY_SPAN, 1, time};
        st->rec.len = 0;
        if (entries_add(&st->rec, t) < 0)
            return E_NOMEM;
        if (time_ns) {
            Entry ns = {LIT_SPAN(K_NS), EMPTY_SPAN, 1, time_ns};
            if (entries_add(&st->rec, ns) < 0)
                return E_NOMEM;
        }
        for (size_t i = 0; i < st->base.len; i++)
            if (entries_add(&st->rec, st->base.p[i]) < 0)
                return E_NOMEM;
        for (size_t i = 0; i < st->contents.len; i++)
            if (entries_set(&st->rec, st->contents.p[i]) < 0)
                return E_NOMEM;
        if (reserve(o, 1) < 0)
            return E_NOMEM;
        PUT_LIT(o, "{");
        for (size_t i = 0; i < st->rec.len; i++)
            if (put_entry(o, &st->rec.p[i], i == 0) < 0)
                return E_NOMEM;
    }
    if (reserve(o, 2) < 0)
        return E_NOMEM;
    PUT_LIT(o, "}\n");
    st->logs++;
    return OK;
}

static int
encode_group(State *st, Span msg)
{
    const uint8_t *p = msg.p, *end = msg.p + msg.n;
    Field f;
    Span topic = EMPTY_SPAN, source = EMPTY_SPAN, log;
    int r, rc;
    size_t ntags = 0;

    /* Pass 1: Topic and Source (last wins), and the tag keys prefixed in one buffer (their
     * spans are set once it stops moving). */
    st->tag_keys.len = 0;
    st->base.len = 0;
    Ahead a = ahead_of(msg);
    while ((r = next_field(&p, end, &f)) > 0) {
        ahead(&a, p);
        if (f.tag == TAG(3, 2))
            topic = f.s;
        else if (f.tag == TAG(4, 2))
            source = f.s;
        else if (f.tag == TAG(6, 2)) {
            Span k, v;
            if (read_pair(f.s, &k, &v) < 0)
                return E_MALFORMED;
            if (!is_utf8(k) || !is_utf8(v))
                return E_NOT_UTF8;
            if (reserve(&st->tag_keys, 8 + (size_t)k.n) < 0)
                return E_NOMEM;
            put(&st->tag_keys, "__tag__:", 8);
            put(&st->tag_keys, (const char *)k.p, (size_t)k.n);
            ntags++;
        }
    }
    if (r < 0)
        return E_MALFORMED;
    if (!is_utf8(topic) || !is_utf8(source))
        return E_NOT_UTF8;
    Entry x = {LIT_SPAN(K_TOPIC), topic, 0, 0};
    if (entries_add(&st->base, x) < 0)
        return E_NOMEM;
    x.key = LIT_SPAN(K_SOURCE);
    x.value = source;
    if (entries_add(&st->base, x) < 0)
        return E_NOMEM;
    if (ntags) { /* pass 1b: the tags, in order, a repeated key keeping its first place */
        size_t at = 0;
        p = msg.p;
        while (next_field(&p, end, &f) > 0) {
            if (f.tag != TAG(6, 2))
                continue;
            Span k, v;
            read_pair(f.s, &k, &v); /* checked by pass 1 */
            x.key = (Span){st->tag_keys.p + at, 8 + k.n};
            x.value = v;
            at += 8 + (size_t)k.n;
            if (entries_set(&st->base, x) < 0)
                return E_NOMEM;
        }
    }
    st->fragment.len = 0;
    for (size_t i = 0; i < st->base.len; i++)
        if (put_entry(&st->fragment, &st->base.p[i], i == 0) < 0)
            return E_NOMEM;

    /* Pass 2: the logs (the framing was checked by pass 1). */
    p = msg.p;
    while ((rc = next_message(&p, end, 1, &log)) > 0) {
        if ((rc = encode_log_fast(st, log)) == E_SLOW)
            rc = encode_log(st, log);
        if (rc != OK)
            return rc;
    }
    return OK;
}

/* Whole LogGroups of buf[offset:len) until the output holds at least `max_bytes`, or the end.
 * Runs without the GIL. */
static int
encode_range(State *st, const uint8_t *buf, Py_ssize_t len, Py_ssize_t offset,
             Py_ssize_t max_bytes, Py_ssize_t *next)
{
    const uint8_t *p = buf + offset, *end = buf + len;
    Span group;
    int r, rc;
    while ((r = next_message(&p, end, 1, &group)) > 0) {
        if ((rc = encode_group(st, group)) != OK)
            return rc;
        if ((Py_ssize_t)st->out.len >= max_bytes)
            break;
    }
    if (r < 0)
        return E_MALFORMED;
    *next = p - buf;
    return OK;
}

/* The output buffer of the last call on a thread, kept for the thread's next call: a fresh
 * ~1 MiB buffer per call costs a page fault (and the kernel's zeroing) per 4 KiB, ~10% of the
 * encoding time. Kept only up to KEEP_BYTES, and freed when the thread ends (worker threads
 * come and go). */
#define KEEP_BYTES ((size_t)4 << 20)
static pthread_key_t kept_key;

static void
free_kept(void *p)
{
    free(p);
}

/* This thread's kept buffer (or an empty one), handed over to the caller. */
static Out
take_kept(void)
{
    Out out = {0};
    uint8_t *p = pthread_getspecific(kept_key);
    if (p != NULL) {
        memcpy(&out.cap, p, sizeof out.cap); /* the capacity is stored in the first bytes */
        out.p = p;
        pthread_setspecific(kept_key, NULL);
    }
    return out;
}

static void
keep(Out *o)
{
    if (o->p != NULL && o->cap <= KEEP_BYTES && o->cap >= sizeof o->cap &&
        pthread_getspecific(kept_key) == NULL) {
        memcpy(o->p, &o->cap, sizeof o->cap);
        if (pthread_setspecific(kept_key, o->p) == 0)
            return;
    }
    free(o->p);
}

static void
state_free(State *st)
{
    for (size_t i = 0; i < st->nkeys; i++)
        free(st->keys[i].text.p);
    free(st->keys);
    keep(&st->out);
    free(st->base.p);
    free(st->rec.p);
    free(st->contents.p);
    free(st->tag_keys.p);
    free(st->fragment.p);
}

/* Encodes the LogGroups of `view` from `offset` on into st->out (until at least max_bytes were
 * written or the end), without the GIL; then, when fd >= 0, writes them all to fd, still
 * without the GIL (a short write is continued, EINTR retried). 0, or -1 with an exception set
 * (ValueError as the docs below say; OSError from write, part of the chunk may be written). */
static int
encode_and_write(State *st, const Py_buffer *view, Py_ssize_t offset, Py_ssize_t max_bytes,
                 int fd, Py_ssize_t *next)
{
    int rc, err = 0;

    if (offset < 0 || offset > view->len) {
        PyErr_Format(PyExc_ValueError, "offset %zd outside [0, %zd]", offset, view->len);
        return -1;
    }
    if (max_bytes < 1) {
        PyErr_Format(PyExc_ValueError, "max_bytes must be positive, not %zd", max_bytes);
        return -1;
    }
    st->out = take_kept();
    Py_BEGIN_ALLOW_THREADS
    rc = encode_range(st, (const uint8_t *)view->buf, view->len, offset, max_bytes, next);
    if (rc == 0 && fd >= 0) {
        size_t done = 0;
        while (done < st->out.len) {
            ssize_t n = write(fd, st->out.p + done, st->out.len - done);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                err = errno;
                break;
            }
            done += (size_t)n;
        }
    }
    Py_END_ALLOW_THREADS
    if (rc == E_NOMEM) {
        PyErr_NoMemory();
        return -1;
    }
    if (rc == E_MALFORMED) {
        PyErr_SetString(PyExc_ValueError, "malformed LogGroupList");
        return -1;
    }
    if (rc == E_NOT_UTF8) {
        PyErr_SetString(PyExc_ValueError,
                        "LogGroupList with a key, tag, topic or source that is not UTF-8");
        return -1;
    }
    if (err != 0) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(encode_chunk_doc,
"encode_chunk(raw, offset, max_bytes, /)\n--\n\n"
"JSON lines of the whole LogGroups of a serialized LogGroupList from byte `offset` on (0, or\n"
"an offset this function returned for the same bytes), until at least `max_bytes` (> 0) were\n"
"written or the end is reached: b''.join(json.dumps(r).encode() + b'\\n' for each record r\n"
"that loghubd._fastlog.decode() makes of them). Returns (lines, next offset, logs); the offset\n"
"is len(raw) at the end. Raises ValueError where decode() would (malformed bytes; a key, tag,\n"
"topic or source that is not UTF-8), and for an offset outside [0, len(raw)] or a max_bytes\n"
"below 1.");

static PyObject *
fastjsonl_encode_chunk(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t offset, max_bytes, next = 0;
    PyObject *result = NULL;
    State st;

    if (!PyArg_ParseTuple(args, "y*nn:encode_chunk", &view, &offset, &max_bytes))
        return NULL;
    memset(&st, 0, sizeof st);
    if (encode_and_write(&st, &view, offset, max_bytes, -1, &next) == 0)
        result = Py_BuildValue("(y#nn)", st.out.p ? (const char *)st.out.p : "",
                               (Py_ssize_t)st.out.len, next, st.logs);
    state_free(&st);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(write_chunk_doc,
"write_chunk(raw, offset, max_bytes, fd, /)\n--\n\n"
"encode_chunk(raw, offset, max_bytes), written to the file descriptor `fd` (>= 0) instead of\n"
"returned: the same bytes, without a bytes object. Returns (bytes written, next offset, logs).\n"
"Raises what encode_chunk raises (before anything is written), and OSError when a write fails\n"
"(part of the chunk may be in the file then).");

static PyObject *
fastjsonl_write_chunk(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t offset, max_bytes, next = 0;
    int fd;
    PyObject *result = NULL;
    State st;

    if (!PyArg_ParseTuple(args, "y*nni:write_chunk", &view, &offset, &max_bytes, &fd))
        return NULL;
    if (fd < 0) {
        PyErr_Format(PyExc_ValueError, "fd must be a file descriptor, not %d", fd);
        PyBuffer_Release(&view);
        return NULL;
    }
    memset(&st, 0, sizeof st);
    if (encode_and_write(&st, &view, offset, max_bytes, fd, &next) == 0)
        result = Py_BuildValue("(nnn)", (Py_ssize_t)st.out.len, next, st.logs);
    state_free(&st);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_chunk", fastjsonl_encode_chunk, METH_VARARGS, encode_chunk_doc},
    {"write_chunk", fastjsonl_write_chunk, METH_VARARGS, write_chunk_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_fastjsonl",
    .m_doc = "C encoder of LogGroupList bytes into the JSON lines of Batch.jsonl()\n"
             "(loghubd/models.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__fastjsonl(void)
{
    static int key_made;
    if (!key_made) {
        if (pthread_key_create(&kept_key, free_kept) != 0)
            return PyErr_NoMemory();
        key_made = 1;
    }
    init_tables();
    return PyModule_Create(&moduledef);
}
