/* _wire.h: reading LogHub's protobuf wire format in place, for the C accelerators of the
 * Batch views (_fastlog.c, which documents the rules, _fastjsonl.c and _fastarrow.c).
 *
 * Static functions only: each extension that includes it gets its own copy. Include after
 * Python.h (Py_ssize_t, Py_ALWAYS_INLINE). Every read is bounded by the end of the enclosing
 * message; nothing here allocates, raises or needs the GIL.
 */
#ifndef LOGHUBD_WIRE_H
#define LOGHUBD_WIRE_H

#include <stdint.h>
#include <string.h>

typedef struct {
    const uint8_t *p;
    Py_ssize_t n;
} Span;

static const uint8_t EMPTY[1] = {0};
#define EMPTY_SPAN ((Span){EMPTY, 0})

/* One decoded field: its number, wire type and payload (varint/fixed value or bytes). */
typedef struct {
    uint32_t num;
    int wt;
    uint32_t tag; /* num << 3 | wt in one word: comparing it is one load of one store (a test
                   * of num and wt together can become a 64-bit load of two 32-bit stores,
                   * which the CPU cannot forward: a stall per field) */
    uint64_t v; /* wire types 0 and 5 */
    Span s;     /* wire type 2 */
} Field;

/* The tag of field `number` with wire type `wire`, as Field.tag holds it. */
#define WIRE_TAG(number, wire) ((uint32_t)(number) << 3 | (uint32_t)(wire))

/* Prefetching ahead of a walk that skips from field to field. A pass over a log group's
 * fields jumps by each log's length: every read's address comes from the read before it, so
 * a cache miss waits for the one before it, ~200 bytes apart, and the CPU's own prefetcher
 * does not run ahead of such a chain. `ahead(&a, p)` asks for every cache line up to
 * AHEAD_BYTES past `p` that was not asked for yet (none past the end), so the lines arrive
 * while the walk is still on earlier ones. A hint only: nothing is read. */
#define AHEAD_BYTES 1024 /* from 256 to 4096 the same (views_bench's batch, jsonl) */
#define CACHE_LINE 64
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)(p))
#endif

typedef struct {
    const uint8_t *next; /* the first byte not prefetched yet */
    const uint8_t *end;
} Ahead;

static inline Ahead
ahead_of(Span msg)
{
    return (Ahead){msg.p, msg.p + msg.n};
}

static inline void
ahead(Ahead *a, const uint8_t *p)
{
    const uint8_t *want = a->end - p > AHEAD_BYTES ? p + AHEAD_BYTES : a->end;
    for (; a->next < want; a->next += CACHE_LINE)
        PREFETCH(a->next);
}

/* Base-128 varint of at most 10 bytes. Like upb, bits beyond the 64th (in the 10th byte)
 * are dropped rather than refused. */
static int
read_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end)
            return -1;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << (7 * i); /* shift <= 63: defined for uint64_t */
        if (!(b & 0x80)) {
            *pp = p;
            *out = v;
            return 0;
        }
    }
    return -1; /* an 11th byte would follow: malformed */
}

/* The next field of the message [*pp, end): 1 = read, 0 = end of message, -1 = malformed.
 * Unknown fields need no special case: callers ignore numbers/wire types they do not expect,
 * which is also how upb treats a known number arriving with an unexpected wire type.
 * Always inlined: it runs for every field, and the call alone is ~20% of count_logs(). */
static inline Py_ALWAYS_INLINE int
next_field(const uint8_t **pp, const uint8_t *end, Field *f)
{
    const uint8_t *p = *pp;
    uint64_t tag, len;
    if (p == end)
        return 0;
    /* upb reads a tag as a varint of at most 5 bytes that must fit in 32 bits, and
     * refuses field number 0. */
    if (read_varint(&p, end, &tag) < 0 || p - *pp > 5 || tag > 0xffffffffu || (tag >> 3) == 0)
        return -1;
    f->tag = (uint32_t)tag;
    f->num = (uint32_t)(tag >> 3);
    f->wt = (int)(tag & 7);
    switch (f->wt) {
    case 0: /* varint */
        if (read_varint(&p, end, &f->v) < 0)
            return -1;
        break;
    case 1: /* fixed64: no field of ours, skipped */
        if (end - p < 8)
            return -1;
        p += 8;
        break;
    case 2: /* length-delimited: the length may not run past the enclosing message, and upb
             * refuses lengths >= INT32_MAX even when the data is there */
        if (read_varint(&p, end, &len) < 0 || len >= INT32_MAX || len > (uint64_t)(end - p))
            return -1;
        f->s.p = p;
        f->s.n = (Py_ssize_t)len;
        p += len;
        break;
    case 5: /* fixed32, little-endian */
        if (end - p < 4)
            return -1;
        f->v = (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
        p += 4;
        break;
    default:
        /* 3/4 = groups: upb skips unknown groups, we refuse and let the Python path run.
         * 6/7 do not exist. */
        return -1;
    }
    *pp = p;
    return 1;
}

/* The next field `num` of [*pp, end) that is length-delimited (an embedded message), the other
 * fields being skipped (and checked) as next_field does: 1 = read, 0 = end, -1 = malformed. */
static inline int
next_message(const uint8_t **pp, const uint8_t *end, uint32_t num, Span *msg)
{
    Field f;
    int r;
    while ((r = next_field(pp, end, &f)) > 0) {
        if (f.tag == WIRE_TAG(num, 2)) {
            *msg = f.s;
            return 1;
        }
    }
    return r;
}

/* Key and Value of a Content or LogTag: the last occurrence of each wins, a missing one is
 * "" (upb does not enforce `required` when parsing). */
static inline int
read_pair(Span msg, Span *key, Span *value)
{
    const uint8_t *p = msg.p, *end = msg.p + msg.n;
    Field f;
    int r;
    /* What every writer sends: Key then Value, each shorter than 128 bytes, nothing else */
    if (msg.n >= 4 && p[0] == WIRE_TAG(1, 2) && p[1] < 0x80 && msg.n >= 4 + p[1]) {
        const uint8_t *v = p + 2 + p[1];
        if (v[0] == WIRE_TAG(2, 2) && v[1] < 0x80 && v + 2 + v[1] == end) {
            *key = (Span){p + 2, p[1]};
            *value = (Span){v + 2, v[1]};
            return 0;
        }
    }
    *key = *value = EMPTY_SPAN;
    while ((r = next_field(&p, end, &f)) > 0) {
        if (f.tag == WIRE_TAG(1, 2))
            *key = f.s;
        else if (f.tag == WIRE_TAG(2, 2))
            *value = f.s;
    }
    return r;
}

/* memcpy for the short runs logs are made of (keys, values, separators: mostly under 16
 * bytes), without a call into libc: two overlapping loads and stores cover 4..16 bytes. */
static inline void
copy_short(uint8_t *dst, const uint8_t *src, size_t n)
{
    if (n >= 8 && n <= 16) {
        uint64_t a, b;
        memcpy(&a, src, 8);
        memcpy(&b, src + n - 8, 8);
        memcpy(dst, &a, 8);
        memcpy(dst + n - 8, &b, 8);
    }
    else if (n >= 4 && n < 8) {
        uint32_t a, b;
        memcpy(&a, src, 4);
        memcpy(&b, src + n - 4, 4);
        memcpy(dst, &a, 4);
        memcpy(dst + n - 4, &b, 4);
    }
    else if (n < 4) {
        for (size_t i = 0; i < n; i++)
            dst[i] = src[i];
    }
    else {
        memcpy(dst, src, n);
    }
}

/* Whether a and b hold the same bytes. Keys and the values that repeat are short: up to 16
 * bytes are compared with (overlapping) word loads rather than a call to memcmp. */
static inline int
span_eq(Span a, Span b)
{
    size_t n = (size_t)a.n;
    if (a.n != b.n)
        return 0;
    if (n >= 8 && n <= 16) {
        uint64_t x0, x1, y0, y1;
        memcpy(&x0, a.p, 8);
        memcpy(&y0, b.p, 8);
        memcpy(&x1, a.p + n - 8, 8);
        memcpy(&y1, b.p + n - 8, 8);
        return ((x0 ^ y0) | (x1 ^ y1)) == 0;
    }
    if (n >= 4 && n < 8) {
        uint32_t x0, x1, y0, y1;
        memcpy(&x0, a.p, 4);
        memcpy(&y0, b.p, 4);
        memcpy(&x1, a.p + n - 4, 4);
        memcpy(&y1, b.p + n - 4, 4);
        return ((x0 ^ y0) | (x1 ^ y1)) == 0;
    }
    if (n < 4) {
        for (size_t i = 0; i < n; i++)
            if (a.p[i] != b.p[i])
                return 0;
        return 1;
    }
    return memcmp(a.p, b.p, n) == 0;
}

/* Whether PyUnicode_DecodeUTF8(strict) accepts `s`: well-formed UTF-8 (no overlong forms, no
 * surrogates, nothing above U+10FFFF), without making the str. */
static inline int
is_utf8(Span s)
{
    const uint8_t *p = s.p, *end = s.p + s.n;
    uint8_t any = 0;
    /* Keys and most values are ASCII. Up to 16 bytes: two (overlapping) word loads. */
    if (s.n >= 8 && s.n <= 16) {
        uint64_t a, b;
        memcpy(&a, p, 8);
        memcpy(&b, end - 8, 8);
        if (((a | b) & 0x8080808080808080u) == 0)
            return 1;
    }
    else if (s.n >= 4 && s.n < 8) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, end - 4, 4);
        if (((a | b) & 0x80808080u) == 0)
            return 1;
    }
    /* Longer ones: one branch-free pass instead of one branch per byte. */
    for (Py_ssize_t i = 0; i < s.n; i++)
        any |= p[i];
    if (any < 0x80)
        return 1;
    while (p < end) {
        uint8_t b = *p++, lo = 0x80, hi = 0xbf; /* the range of the 2nd byte */
        int more;
        if (b < 0x80)
            continue;
        if (b >= 0xc2 && b <= 0xdf) {
            more = 1;
        }
        else if (b >= 0xe0 && b <= 0xef) {
            more = 2;
            if (b == 0xe0)
                lo = 0xa0; /* below: overlong */
            else if (b == 0xed)
                hi = 0x9f; /* above: surrogates */
        }
        else if (b >= 0xf0 && b <= 0xf4) {
            more = 3;
            if (b == 0xf0)
                lo = 0x90; /* below: overlong */
            else if (b == 0xf4)
                hi = 0x8f; /* above: beyond U+10FFFF */
        }
        else {
            return 0; /* a continuation byte, C0/C1 (overlong) or F5..FF */
        }
        if (end - p < more || p[0] < lo || p[0] > hi)
            return 0;
        for (int i = 1; i < more; i++)
            if ((p[i] & 0xc0) != 0x80)
                return 0;
        p += more;
    }
    return 1;
}

#endif
