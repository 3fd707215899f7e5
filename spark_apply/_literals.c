/* rowbus.spark_apply._literals: SQL literals straight from a row image's wire columns.
 *
 * `render(kinds, ints, uints, doubles, strings, blobs)` takes an image as the protobuf
 * encoding holds it (PROTOCOL.md §4: one kind byte per value, per-kind arrays) and returns the
 * values' SQL literals joined by "\0" — exactly what `rowbus.spark_apply.literals.image_text`
 * returns for the decoded values — without building the values.
 *
 * Whatever it does not cover exactly as the Python renderer does (a SET, a DECIMAL string not
 * in plain canonical form, a non-finite double, a date or time out of range, arrays that do
 * not match the kinds, an unknown kind) makes it return None: the caller then decodes and
 * renders that image in Python, which also raises what decoding raises. So the two paths can
 * only differ where both return text (tests/unit/spark_apply/test_rendered.py compares them).
 *
 * `row_text(value)` does the whole of a protobuf row record's reading on the executors: it
 * checks the CRC, parses the Envelope's RowChange and its images from the wire and writes
 * `rendered.rendered_row`'s text, returning (source, ts, text) — no Python object per field
 * or value. Any record it does not take whole (another kind, a field it does not know or a
 * repeated message field, names json.dumps would escape, a value `render` leaves, text that is
 * not UTF-8, a corrupt value) makes it return None: the caller decodes it in Python, which
 * raises what decoding raises.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "rowbus_buffer.h"

enum {
    K_NULL = 0, K_INT = 1, K_UINT = 2, K_DOUBLE = 3, K_DECIMAL = 4, K_STRING = 5, K_BYTES = 6,
    K_DATE = 7, K_DATETIME = 8, K_TIMESTAMP = 9, K_TIME = 10, K_SET = 11, K_ZERO_DATE = 12,
};

#define US_PER_DAY 86400000000LL
#define TIME_MAX_US 3020399999999LL /* 838:59:59.999999 */
/* Days from 1970-01-01 to 0001-01-01 and to 9999-12-31 (Python's date range). */
#define MIN_DAYS (-719162LL)
#define MAX_DAYS 2932896LL

/* The text being rendered (native/rowbus_buffer.h). */
typedef RowbusBuffer Buf;

/* Howard Hinnant's civil_from_days: days since 1970-01-01 -> y, m, d (proleptic Gregorian). */
static void civil(long long z, long long *y, unsigned *m, unsigned *d) {
    z += 719468;
    const long long era = (z >= 0 ? z : z - 146096) / 146097;
    const unsigned doe = (unsigned)(z - era * 146097);
    const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (long long)yoe + era * 400 + (*m <= 2);
}

static long long floordiv(long long a, long long b, long long *rem) {
    long long q = a / b, r = a % b;
    if (r < 0) { q -= 1; r += b; }
    *rem = r;
    return q;
}

/* 1: written; 0: not covered (caller returns None); -1: error set. */
static int put_date(Buf *b, long long days, int quote) {
    if (days < MIN_DAYS || days > MAX_DAYS) return 0;
    long long y; unsigned m, d;
    civil(days, &y, &m, &d);
    char s[16];
    int n = snprintf(s, sizeof s, quote ? "'%04lld-%02u-%02u'" : "%04lld-%02u-%02u", y, m, d);
    return buf_put(b, s, n) < 0 ? -1 : 1;
}

static int put_datetime(Buf *b, long long us) {
    long long rest;
    long long days = floordiv(us, US_PER_DAY, &rest);
    if (days < MIN_DAYS || days > MAX_DAYS) return 0;
    if (buf_put(b, "'", 1) < 0 || put_date(b, days, 0) < 0) return -1;
    long long secs = rest / 1000000, frac = rest % 1000000;
    char s[32];
    int n = snprintf(s, sizeof s, " %02lld:%02lld:%02lld", secs / 3600, secs / 60 % 60, secs % 60);
    if (frac) n += snprintf(s + n, sizeof s - (size_t)n, ".%06lld", frac);
    s[n++] = '\'';
    return buf_put(b, s, n) < 0 ? -1 : 1;
}

static int put_time(Buf *b, long long us) {
    if (us < -TIME_MAX_US || us > TIME_MAX_US) return 0;
    const char *sign = us < 0 ? "-" : "";
    if (us < 0) us = -us;
    long long secs = us / 1000000, frac = us % 1000000;
    char s[40];
    int n = snprintf(s, sizeof s, "'%s%02lld:%02lld:%02lld", sign, secs / 3600, secs / 60 % 60,
                     secs % 60);
    if (frac) n += snprintf(s + n, sizeof s - (size_t)n, ".%06lld", frac);
    s[n++] = '\'';
    return buf_put(b, s, n) < 0 ? -1 : 1;
}

/* Plain canonical decimal text ([-]digits[.digits], no leading zero but a lone one) is what
 * format(Decimal(text), "f") returns unchanged. */
static int canonical_decimal(const char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    if (i < n && s[i] == '-') i++;
    Py_ssize_t start = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    Py_ssize_t digits = i - start;
    if (digits == 0 || (digits > 1 && s[start] == '0')) return 0;
    if (i == n) return 1;
    if (s[i] != '.') return 0;
    i++;
    Py_ssize_t fstart = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    return i == n && i > fstart;
}

static int two(const char *s) {
    return (s[0] - '0') * 10 + (s[1] - '0');
}

static int all_digits(const char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

/* What rowbus.protocol.values.ZeroDate accepts, in ASCII digits (anything else, Python's
 * decoding judges): YYYY-MM-DD[ HH:MM:SS[.f{1,6}]], month <= 12, day <= 31, a valid clock,
 * and not a calendar date (a zero year, month or day, or a day the month lacks). Rendering
 * any other text here let a corrupt record through that decoding rejects (the fuzzer's find). */
static int zero_date_ok(const char *s, Py_ssize_t n) {
    static const int dim[13] = {0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (n != 10 && n != 19 && (n < 21 || n > 26)) return 0;
    if (s[4] != '-' || s[7] != '-' || !all_digits(s, 4) || !all_digits(s + 5, 2) ||
        !all_digits(s + 8, 2))
        return 0;
    int y = (s[0] - '0') * 1000 + (s[1] - '0') * 100 + two(s + 2), m = two(s + 5), d = two(s + 8);
    if (m > 12 || d > 31) return 0;
    if (n > 10) {
        if (s[10] != ' ' || s[13] != ':' || s[16] != ':' || !all_digits(s + 11, 2) ||
            !all_digits(s + 14, 2) || !all_digits(s + 17, 2))
            return 0;
        if (two(s + 11) > 23 || two(s + 14) > 59 || two(s + 17) > 59) return 0;
        if (n > 19 && (s[19] != '.' || !all_digits(s + 20, n - 20))) return 0;
    }
    if (y && m && d) {
        int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        int days = m == 2 && !leap ? 28 : dim[m];
        if (d <= days) return 0; /* a calendar date: decoding raises */
    }
    return 1;
}

static int put_escaped(Buf *b, const char *s, Py_ssize_t n) {
    /* pymysql's escape_string, on UTF-8 bytes (no multi-byte sequence holds these bytes). */
    if (buf_grow(b, 2 * n + 2) < 0) return -1;
    char *o = b->p + b->len;
    *o++ = '\'';
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = s[i];
        switch (c) {
            case '\0': *o++ = '\\'; *o++ = '0'; break;
            case '\\': *o++ = '\\'; *o++ = '\\'; break;
            case '\n': *o++ = '\\'; *o++ = 'n'; break;
            case '\r': *o++ = '\\'; *o++ = 'r'; break;
            case '\032': *o++ = '\\'; *o++ = 'Z'; break;
            case '"': *o++ = '\\'; *o++ = '"'; break;
            case '\'': *o++ = '\\'; *o++ = '\''; break;
            default: *o++ = c;
        }
    }
    *o++ = '\'';
    b->len = o - b->p;
    return 0;
}

/* An image's columns as C arrays: from Python lists (`render`) or straight from the protobuf
 * wire bytes (`row_text`). Both fill the one `Cols` and share `render_into`. */
typedef struct {
    const char *p;
    Py_ssize_t n;
} Span;

typedef struct {
    void *p;
    Py_ssize_t n, cap;
} Vec;

typedef struct {
    Span kinds;
    Vec ints, uints, doubles, strings, blobs; /* long long, unsigned long long, double, Span */
    Py_ssize_t at[5];                         /* next unread element of each */
} Cols;

static int vec_push(Vec *v, const void *item, size_t size) {
    if (v->n == v->cap) {
        Py_ssize_t cap = v->cap ? 2 * v->cap : 64;
        void *p = PyMem_Realloc(v->p, (size_t)cap * size);
        if (p == NULL) { PyErr_NoMemory(); return -1; }
        v->p = p;
        v->cap = cap;
    }
    memcpy((char *)v->p + (size_t)v->n * size, item, size);
    v->n++;
    return 0;
}

static void cols_reset(Cols *c) {
    c->kinds.p = "";
    c->kinds.n = 0;
    c->ints.n = c->uints.n = c->doubles.n = c->strings.n = c->blobs.n = 0;
    memset(c->at, 0, sizeof c->at);
}

/* Reused by the calls, so a record costs no allocation once the arrays have grown. A call
 * takes it only when no other call holds it (cols_take): `render` runs Python code (a
 * sequence's iteration, a garbage collection's finalizers) and so can be re-entered, or
 * another thread can run, while the arrays are filled; that call then uses arrays of its
 * own. The GIL serializes the flag. */
static Cols COLS;
static int COLS_BUSY = 0;

static Cols *cols_take(Cols *own) {
    if (COLS_BUSY) {
        memset(own, 0, sizeof *own);
        cols_reset(own);
        return own;
    }
    COLS_BUSY = 1;
    return &COLS;
}

static void cols_give(Cols *c) {
    if (c == &COLS) {
        COLS_BUSY = 0;
        return;
    }
    PyMem_Free(c->ints.p);
    PyMem_Free(c->uints.p);
    PyMem_Free(c->doubles.p);
    PyMem_Free(c->strings.p);
    PyMem_Free(c->blobs.p);
}

#define NEXT(c, i, vec, T, out)                                            \
    do {                                                                   \
        if ((c)->at[i] >= (c)->vec.n) return 0;                            \
        *(out) = ((T *)(c)->vec.p)[(c)->at[i]++];                          \
    } while (0)

static const char HEX[] = "0123456789abcdef";

/* 1: the whole image written; 0: not covered; -1: error. */
static int render_into(Buf *b, Cols *c) {
    const unsigned char *kinds = (const unsigned char *)c->kinds.p;
    for (Py_ssize_t k = 0; k < c->kinds.n; k++) {
        if (k && buf_put(b, "\0", 1) < 0) return -1;
        long long v;
        int r;
        switch (kinds[k]) {
            case K_NULL:
                if (buf_put(b, "NULL", 4) < 0) return -1;
                break;
            case K_INT: {
                NEXT(c, 0, ints, long long, &v);
                char s[24];
                if (buf_put(b, s, snprintf(s, sizeof s, "%lld", v)) < 0) return -1;
                break;
            }
            case K_UINT: {
                unsigned long long u;
                NEXT(c, 1, uints, unsigned long long, &u);
                if (u <= (unsigned long long)INT64_MAX) return 0;
                char s[24];
                if (buf_put(b, s, snprintf(s, sizeof s, "%llu", u)) < 0) return -1;
                break;
            }
            case K_DOUBLE: {
                double d;
                NEXT(c, 2, doubles, double, &d);
                if (!isfinite(d)) return 0;
                char *s = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
                if (s == NULL) return -1;
                r = buf_put(b, s, (Py_ssize_t)strlen(s));
                PyMem_Free(s);
                if (r < 0) return -1;
                break;
            }
            case K_DECIMAL:
            case K_STRING:
            case K_ZERO_DATE: {
                Span s;
                NEXT(c, 3, strings, Span, &s);
                if (kinds[k] == K_STRING) {
                    if (put_escaped(b, s.p, s.n) < 0) return -1;
                } else if (kinds[k] == K_DECIMAL) {
                    if (!canonical_decimal(s.p, s.n)) return 0;
                    if (buf_put(b, s.p, s.n) < 0) return -1;
                } else {
                    if (!zero_date_ok(s.p, s.n)) return 0;
                    if (buf_put(b, "'", 1) < 0 || buf_put(b, s.p, s.n) < 0 || buf_put(b, "'", 1) < 0)
                        return -1;
                }
                break;
            }
            case K_BYTES: {
                Span s;
                NEXT(c, 4, blobs, Span, &s);
                if (s.n == 0) {
                    if (buf_put(b, "''", 2) < 0) return -1;
                    break;
                }
                if (buf_grow(b, 2 * s.n + 3) < 0) return -1;
                char *w = b->p + b->len;
                *w++ = 'X';
                *w++ = '\'';
                for (Py_ssize_t i = 0; i < s.n; i++) {
                    unsigned char ch = (unsigned char)s.p[i];
                    *w++ = HEX[ch >> 4];
                    *w++ = HEX[ch & 15];
                }
                *w++ = '\'';
                b->len = w - b->p;
                break;
            }
            case K_DATE:
                NEXT(c, 0, ints, long long, &v);
                if ((r = put_date(b, v, 1)) <= 0) return r;
                break;
            case K_DATETIME:
            case K_TIMESTAMP: /* rendered as UTC wall clock, like a naive DATETIME */
                NEXT(c, 0, ints, long long, &v);
                if ((r = put_datetime(b, v)) <= 0) return r;
                break;
            case K_TIME:
                NEXT(c, 0, ints, long long, &v);
                if ((r = put_time(b, v)) <= 0) return r;
                break;
            default: /* K_SET (sorted members: left to Python) and unknown kinds */
                return 0;
        }
    }
    /* Every array consumed exactly, as decoding requires. */
    if (c->at[0] != c->ints.n || c->at[1] != c->uints.n || c->at[2] != c->doubles.n ||
        c->at[3] != c->strings.n || c->at[4] != c->blobs.n)
        return 0;
    return 1;
}

/* --- render(kinds, ints, uints, doubles, strings, blobs) ------------------------------------ */

/* 1: every element of `obj` converted into `c`'s array `i`; 0: one is not of its exact type or
 * out of range (the image is not covered); -1: error. The Spans point into the objects of
 * `seq`, a tuple the caller made of the argument and releases only after rendering: a list
 * itself could lose its items (and free them) while Python code runs between two arrays. */
static int from_list(Cols *c, int i, PyObject *seq) {
    int ok = 1;
    for (Py_ssize_t j = 0; ok == 1 && j < PyTuple_GET_SIZE(seq); j++) {
        PyObject *o = PyTuple_GET_ITEM(seq, j);
        if (i == 0) {
            int overflow = 0;
            long long v = PyLong_CheckExact(o) ? PyLong_AsLongLongAndOverflow(o, &overflow) : 0;
            if (!PyLong_CheckExact(o) || overflow || (v == -1 && PyErr_Occurred()))
                ok = 0;
            else
                ok = vec_push(&c->ints, &v, sizeof v) < 0 ? -1 : 1;
        } else if (i == 1) {
            unsigned long long u = PyLong_CheckExact(o) ? PyLong_AsUnsignedLongLong(o) : 0;
            if (!PyLong_CheckExact(o) || PyErr_Occurred())
                ok = 0;
            else
                ok = vec_push(&c->uints, &u, sizeof u) < 0 ? -1 : 1;
        } else if (i == 2) {
            if (!PyFloat_CheckExact(o))
                ok = 0;
            else {
                double d = PyFloat_AS_DOUBLE(o);
                ok = vec_push(&c->doubles, &d, sizeof d) < 0 ? -1 : 1;
            }
        } else {
            Span s = {NULL, 0};
            if (i == 3 && PyUnicode_CheckExact(o))
                s.p = PyUnicode_AsUTF8AndSize(o, &s.n);
            else if (i == 4 && PyBytes_CheckExact(o)) {
                s.p = PyBytes_AS_STRING(o);
                s.n = PyBytes_GET_SIZE(o);
            }
            if (s.p == NULL)
                ok = 0;
            else
                ok = vec_push(i == 3 ? &c->strings : &c->blobs, &s, sizeof s) < 0 ? -1 : 1;
        }
        if (ok == 0) PyErr_Clear();
    }
    return ok;
}

static PyObject *render(PyObject *self, PyObject *args) {
    PyObject *kinds_obj, *objs[5];
    if (!PyArg_ParseTuple(args, "OOOOOO:render", &kinds_obj, &objs[0], &objs[1], &objs[2],
                          &objs[3], &objs[4]))
        return NULL;
    Py_buffer kinds;
    if (PyObject_GetBuffer(kinds_obj, &kinds, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL;
    Buf b = {NULL, 0, 0};
    PyObject *seqs[5] = {NULL};
    int r = 1;
    /* Every Python-level step (iterating upb's containers, ...) before the arrays are taken. */
    for (int i = 0; r == 1 && i < 5; i++) {
        seqs[i] = PySequence_Tuple(objs[i]);
        if (seqs[i] == NULL) r = -1;
    }
    Cols own;
    Cols *c = NULL;
    if (r == 1) {
        c = cols_take(&own);
        cols_reset(c);
    }
    for (int i = 0; r == 1 && i < 5; i++) r = from_list(c, i, seqs[i]);
    if (r == 1) {
        c->kinds.p = (const char *)kinds.buf;
        c->kinds.n = kinds.len;
        r = render_into(&b, c);
    }
    if (c != NULL) cols_give(c);
    if (r == 1)
        result = PyUnicode_DecodeUTF8(b.p ? b.p : "", b.len, "strict");
    else if (r == 0)
        result = Py_NewRef(Py_None);
    for (int i = 0; i < 5; i++) Py_XDECREF(seqs[i]);
    PyBuffer_Release(&kinds);
    PyMem_Free(b.p);
    return result;
}

/* --- row_text(value): a protobuf row record straight to its rendered text ----------------- */

static uint32_t CRC_TABLE[256];

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        CRC_TABLE[n] = c;
    }
}

static uint32_t crc32_of(const unsigned char *p, Py_ssize_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (Py_ssize_t i = 0; i < n; i++) c = CRC_TABLE[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

typedef struct {
    const unsigned char *p, *end;
} Rd;

static int rd_varint(Rd *r, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70 && r->p < r->end; shift += 7) {
        unsigned char ch = *r->p++;
        v |= (uint64_t)(ch & 0x7F) << shift;
        if (!(ch & 0x80)) { *out = v; return 1; }
    }
    return 0;
}

static int rd_fixed64(Rd *r, uint64_t *out) {
    if (r->end - r->p < 8) return 0;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | r->p[i];
    r->p += 8;
    *out = v;
    return 1;
}

static int rd_len(Rd *r, Span *out) {
    uint64_t n;
    if (!rd_varint(r, &n) || n > (uint64_t)(r->end - r->p)) return 0;
    out->p = (const char *)r->p;
    out->n = (Py_ssize_t)n;
    r->p += n;
    return 1;
}

/* A tag: field number and wire type. 0 at a malformed one. */
static int rd_tag(Rd *r, uint32_t *field, uint32_t *wire) {
    uint64_t t;
    if (!rd_varint(r, &t) || (t >> 3) == 0 || (t >> 3) > 0x1FFFFFFF) return 0;
    *field = (uint32_t)(t >> 3);
    *wire = (uint32_t)(t & 7);
    return 1;
}

/* One value (or a packed run) of a numeric repeated field into its array. */
static int rd_numbers(Rd *r, uint32_t wire, int i, Cols *c) {
    Rd run = *r;
    Span s;
    int packed = wire == 2;
    if (packed) {
        if (!rd_len(r, &s)) return 0;
        run.p = (const unsigned char *)s.p;
        run.end = run.p + s.n;
    } else if (wire != (i == 2 ? 1u : 0u)) {
        return 0;
    }
    do {
        uint64_t v;
        if (i == 2 ? !rd_fixed64(&run, &v) : !rd_varint(&run, &v)) return 0;
        int pushed;
        if (i == 0) {
            long long z = (long long)(v >> 1) ^ -(long long)(v & 1); /* zigzag */
            pushed = vec_push(&c->ints, &z, sizeof z);
        } else if (i == 1) {
            unsigned long long u = v;
            pushed = vec_push(&c->uints, &u, sizeof u);
        } else {
            double d;
            memcpy(&d, &v, sizeof d);
            pushed = vec_push(&c->doubles, &d, sizeof d);
        }
        if (pushed < 0) return -1;
    } while (packed && run.p < run.end);
    if (!packed) *r = run;
    return 1;
}

/* An Image message into `c`: 1, 0 (not one this parser takes: Python decodes it), -1. */
static int rd_image(Span msg, Cols *c) {
    Rd r = {(const unsigned char *)msg.p, (const unsigned char *)msg.p + msg.n};
    cols_reset(c);
    while (r.p < r.end) {
        uint32_t field, wire;
        Span s;
        if (!rd_tag(&r, &field, &wire)) return 0;
        int got;
        switch (field) {
            case 1:
                if (wire != 2 || !rd_len(&r, &c->kinds)) return 0;
                break;
            case 2: case 3: case 4:
                if ((got = rd_numbers(&r, wire, (int)field - 2, c)) <= 0) return got;
                break;
            case 5: case 6:
                if (wire != 2 || !rd_len(&r, &s)) return 0;
                if (vec_push(field == 5 ? &c->strings : &c->blobs, &s, sizeof s) < 0) return -1;
                break;
            default:
                return 0;
        }
    }
    return 1;
}

typedef struct {
    Span source, schema, table, txn_id, file, gtid, before, after;
    uint64_t ts, op, schema_id, index, count, offset, upstream;
    int has_count, has_gtid, has_before, has_after, has_txn, has_position;
    Span pk[64];
    int npk;
} Row;

static int rd_txn(Span msg, Row *row) {
    Rd r = {(const unsigned char *)msg.p, (const unsigned char *)msg.p + msg.n};
    while (r.p < r.end) {
        uint32_t field, wire;
        if (!rd_tag(&r, &field, &wire)) return 0;
        if (field == 1 && wire == 2) {
            if (!rd_len(&r, &row->txn_id)) return 0;
        } else if ((field == 2 || field == 3) && wire == 0) {
            uint64_t v;
            if (!rd_varint(&r, &v) || v > 0xFFFFFFFFu) return 0;
            if (field == 2) row->index = v;
            else { row->count = v; row->has_count = 1; }
        } else {
            return 0;
        }
    }
    return 1;
}

static int rd_position(Span msg, Row *row) {
    Rd r = {(const unsigned char *)msg.p, (const unsigned char *)msg.p + msg.n};
    while (r.p < r.end) {
        uint32_t field, wire;
        if (!rd_tag(&r, &field, &wire)) return 0;
        if (field == 1 && wire == 2) {
            if (!rd_len(&r, &row->file)) return 0;
        } else if (field == 3 && wire == 2) {
            if (!rd_len(&r, &row->gtid)) return 0;
            row->has_gtid = 1;
        } else if ((field == 2 || field == 4) && wire == 0) {
            if (!rd_varint(&r, field == 2 ? &row->offset : &row->upstream)) return 0;
        } else {
            return 0;
        }
    }
    return 1;
}

/* The Envelope body of a row record into `row`: 1, or 0 when it is anything else, uses a
 * field this parser does not take, or repeats a message field (Python decodes it then). */
static int rd_row(Span body, Row *row) {
    Rd env = {(const unsigned char *)body.p, (const unsigned char *)body.p + body.n};
    uint32_t field, wire;
    Span msg, s;
    if (!rd_tag(&env, &field, &wire) || field != 1 || wire != 2 || !rd_len(&env, &msg) ||
        env.p != env.end)
        return 0;
    memset(row, 0, sizeof *row);
    row->source.p = row->schema.p = row->table.p = row->txn_id.p = row->file.p = "";
    Rd r = {(const unsigned char *)msg.p, (const unsigned char *)msg.p + msg.n};
    while (r.p < r.end) {
        if (!rd_tag(&r, &field, &wire)) return 0;
        int ok;
        switch (field) {
            case 2: case 6:
                ok = wire == 1 && rd_fixed64(&r, field == 2 ? &row->ts : &row->schema_id);
                break;
            case 3:
                ok = wire == 0 && rd_varint(&r, &row->op);
                break;
            case 1: case 4: case 5:
                ok = wire == 2 &&
                     rd_len(&r, field == 1 ? &row->source : field == 4 ? &row->schema : &row->table);
                break;
            case 7:
                ok = wire == 2 && row->npk < 64 && rd_len(&r, &row->pk[row->npk++]);
                break;
            case 8: case 9: case 10: case 11: {
                int *has = field == 8 ? &row->has_before : field == 9 ? &row->has_after
                         : field == 10 ? &row->has_txn : &row->has_position;
                ok = wire == 2 && !*has && rd_len(&r, &s);
                if (ok) {
                    *has = 1;
                    if (field == 8) row->before = s;
                    else if (field == 9) row->after = s;
                    else if (field == 10) ok = rd_txn(s, row);
                    else ok = rd_position(s, row);
                }
                break;
            }
            default:
                ok = 0;
        }
        if (!ok) return 0;
    }
    return 1;
}

static const char *const OPS[] = {NULL, "insert", "update", "delete", "read"};

static int put_u64(Buf *b, unsigned long long v) {
    char s[24];
    return buf_put(b, s, snprintf(s, sizeof s, "%llu", v));
}

/* A header text field: no NUL (the separator) in it. 1, 0 (not covered), -1. */
static int put_field(Buf *b, Span s) {
    if (s.n == 0) return 1;
    if (memchr(s.p, '\0', (size_t)s.n) != NULL) return 0;
    return buf_put(b, s.p, s.n) < 0 ? -1 : 1;
}

/* The primary key as json.dumps of its tuple, for names json.dumps keeps as they are. */
static int put_key(Buf *b, const Row *row) {
    if (buf_put(b, "[", 1) < 0) return -1;
    for (int i = 0; i < row->npk; i++) {
        const Span *s = &row->pk[i];
        for (Py_ssize_t j = 0; j < s->n; j++) {
            unsigned char ch = (unsigned char)s->p[j];
            if (ch < 0x20 || ch > 0x7E || ch == '"' || ch == '\\') return 0;
        }
        if ((i && buf_put(b, ", ", 2) < 0) || buf_put(b, "\"", 1) < 0 || buf_put(b, s->p, s->n) < 0 ||
            buf_put(b, "\"", 1) < 0)
            return -1;
    }
    return buf_put(b, "]", 1) < 0 ? -1 : 1;
}

/* buf_put()'s 0 / -1 as this file's 1 / -1; TRY returns a 0 or -1 from the function. */
#define OK(x) ((x) < 0 ? -1 : 1)
#define TRY(x)                   \
    do {                         \
        int r_ = (x);            \
        if (r_ <= 0) return r_;  \
    } while (0)

/* `rendered.rendered_row` of the decoded record, written from the wire. 1, 0, -1. */
static int put_row_with(Buf *b, const Row *row, Cols *c) {
    int nb = -1;
    int after_only = row->op == 1 || row->op == 4;
    if (row->op < 1 || row->op > 4 || row->has_before == after_only ||
        row->has_after == (row->op == 3))
        return 0; /* Python raises: an insert has only after, a delete only before */
    if (row->has_before) {
        TRY(rd_image(row->before, c));
        nb = (int)c->kinds.n;
        if (nb == 0) return 0;
    }
    char s[96];
    TRY(OK(buf_put(b, OPS[row->op], (Py_ssize_t)strlen(OPS[row->op]) + 1))); /* with its NUL */
    TRY(put_field(b, row->schema));
    TRY(OK(buf_put(b, "\0", 1)));
    TRY(put_field(b, row->table));
    TRY(OK(buf_put(b, s, snprintf(s, sizeof s, "%c%llu%c", 0, (unsigned long long)row->schema_id, 0))));
    TRY(put_key(b, row));
    TRY(OK(buf_put(b, "\0", 1)));
    TRY(put_field(b, row->txn_id));
    TRY(OK(buf_put(b, s, snprintf(s, sizeof s, "%c%llu%c", 0, (unsigned long long)row->index, 0))));
    if (row->has_count) TRY(OK(put_u64(b, row->count)));
    TRY(OK(buf_put(b, "\0", 1)));
    TRY(put_field(b, row->file));
    TRY(OK(buf_put(b, s, snprintf(s, sizeof s, "%c%llu%c", 0, (unsigned long long)row->offset, 0))));
    if (row->has_gtid) {
        TRY(OK(buf_put(b, "=", 1)));
        TRY(put_field(b, row->gtid));
    }
    TRY(OK(buf_put(b, s, snprintf(s, sizeof s, "%c%llu%c%d%c", 0, (unsigned long long)row->upstream,
                               0, nb, 0))));
    if (row->has_before) {
        TRY(OK(buf_put(b, "\0", 1)));
        TRY(render_into(b, c));
    }
    if (row->has_after) {
        TRY(rd_image(row->after, c));
        if (c->kinds.n == 0 || (nb >= 0 && c->kinds.n != nb)) return 0;
        TRY(OK(buf_put(b, "\0", 1)));
        TRY(render_into(b, c));
    }
    return 1;
}

static int put_row(Buf *b, const Row *row) {
    Cols own;
    Cols *c = cols_take(&own);
    int r = put_row_with(b, row, c);
    cols_give(c);
    return r;
}

/* A protobuf record read whole: a row (Envelope field 1) or a Resolved (field 3), as `kinds`
 * allows (bit n: Envelope field n). 1 with *kind, *source, *ts and *text set (new references;
 * text None for a Resolved), 0 (not one this parser takes whole), -1 (error set). */
static int read_record(const unsigned char *p, Py_ssize_t len, unsigned kinds, int *kind,
                       PyObject **source, unsigned long long *ts, PyObject **text) {
    Py_ssize_t end = len - 5;
    if (end < 0 || p[end] != 0x7D ||
        crc32_of(p, end) != ((uint32_t)p[end + 1] | (uint32_t)p[end + 2] << 8 |
                             (uint32_t)p[end + 3] << 16 | (uint32_t)p[end + 4] << 24))
        return 0;
    Rd env = {p, p + end};
    uint32_t field, wire;
    Span msg;
    if (!rd_tag(&env, &field, &wire) || wire != 2 || !rd_len(&env, &msg) || env.p != env.end ||
        field >= 32 || !(kinds & (1u << field))) /* a shift of 32 or more is undefined */
        return 0;
    if (field == 1) {
        Row row;
        Buf b = {NULL, 0, 0};
        Span body = {(const char *)p, end};
        int r = rd_row(body, &row);
        if (r == 1) r = put_row(&b, &row);
        if (r == 1) {
            *source = PyUnicode_DecodeUTF8(row.source.p, row.source.n, "strict");
            *text = *source ? PyUnicode_DecodeUTF8(b.p, b.len, "strict") : NULL;
            if (*text == NULL) {
                Py_CLEAR(*source);
                PyErr_Clear(); /* not UTF-8: Python's decoding raises what it must */
                r = 0;
            } else {
                *ts = row.ts;
                *kind = 1;
            }
        }
        PyMem_Free(b.p);
        return r;
    }
    if (field == 3) {
        Rd r = {(const unsigned char *)msg.p, (const unsigned char *)msg.p + msg.n};
        Span src = {"", 0};
        uint64_t t = 0;
        while (r.p < r.end) {
            if (!rd_tag(&r, &field, &wire)) return 0;
            if (field == 1 && wire == 2) {
                if (!rd_len(&r, &src)) return 0;
            } else if (field == 2 && wire == 1) {
                if (!rd_fixed64(&r, &t)) return 0;
            } else {
                return 0;
            }
        }
        *source = PyUnicode_DecodeUTF8(src.p, src.n, "strict");
        if (*source == NULL) {
            PyErr_Clear();
            return 0;
        }
        *ts = t;
        *text = Py_NewRef(Py_None);
        *kind = 3;
        return 1;
    }
    return 0;
}

static PyObject *row_text(PyObject *self, PyObject *arg) {
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *source = NULL, *text = NULL, *result = NULL;
    unsigned long long ts;
    int kind;
    int r = read_record((const unsigned char *)v.buf, v.len, 1u << 1, &kind, &source, &ts, &text);
    if (r == 1)
        result = Py_BuildValue("(NKN)", source, ts, text);
    else if (r == 0)
        result = Py_NewRef(Py_None);
    PyBuffer_Release(&v);
    return result;
}

static PyObject *S_ERROR, *S_OFFSET, *S_VALUE, *S_HEADERS, *K_ROW_NAME, *K_RESOLVED_NAME;

/* The kinds `classify`'s kind header allows: "" any of ours, "row", "resolved"; else none. */
static unsigned kinds_of(PyObject *kind) {
    if (!PyUnicode_Check(kind)) return 0;
    if (PyUnicode_GET_LENGTH(kind) == 0) return 1u << 1 | 1u << 3;
    if (PyUnicode_Compare(kind, K_ROW_NAME) == 0) return 1u << 1;
    if (PyUnicode_Compare(kind, K_RESOLVED_NAME) == 0) return 1u << 3;
    return 0;
}

static PyObject *call0(PyObject *obj, PyObject *name) {
    return PyObject_CallMethodNoArgs(obj, name);
}

/* Appends one row of the nine columns; steals nothing. 0 or -1. */
static int append_row(PyObject **lists, PyObject **items) {
    for (int k = 0; k < 9; k++)
        if (PyList_Append(lists[k], items[k]) < 0) return -1;
    return 0;
}

static PyObject *append_records(PyObject *self, PyObject *args) {
    PyObject *msgs, *cols, *topic, *partition, *classify;
    Py_ssize_t i;
    long long end;
    if (!PyArg_ParseTuple(args, "O!nLO!OOO:append_records", &PyList_Type, &msgs, &i, &end,
                          &PyTuple_Type, &cols, &topic, &partition, &classify))
        return NULL;
    if (PyTuple_GET_SIZE(cols) != 9) {
        PyErr_SetString(PyExc_ValueError, "append_records: nine column lists");
        return NULL;
    }
    PyObject *lists[9];
    for (int k = 0; k < 9; k++) {
        lists[k] = PyTuple_GET_ITEM(cols, k);
        if (!PyList_Check(lists[k])) {
            PyErr_SetString(PyExc_TypeError, "append_records: the columns must be lists");
            return NULL;
        }
    }
    if (i < 0) {
        PyErr_SetString(PyExc_ValueError, "append_records: a negative start");
        return NULL;
    }
    PyObject *seen = NULL, *encoding = NULL; /* the last headers classified, and their answer */
    unsigned kinds = 0;
    /* The list's size is read anew and the message held for each round: the message methods
     * and `classify` are Python code that may shrink the list (or free the message) under us. */
    for (; i < PyList_GET_SIZE(msgs); i++) {
        PyObject *msg = Py_NewRef(PyList_GET_ITEM(msgs, i));
        PyObject *err = call0(msg, S_ERROR);
        if (err == NULL) {
            Py_DECREF(msg);
            goto fail;
        }
        int failed = err != Py_None;
        Py_DECREF(err);
        if (failed) {
            Py_DECREF(msg);
            break;
        }
        PyObject *offset = call0(msg, S_OFFSET);
        if (offset == NULL) {
            Py_DECREF(msg);
            goto fail;
        }
        long long o = PyLong_AsLongLong(offset);
        if (o == -1 && PyErr_Occurred()) {
            Py_DECREF(offset);
            Py_DECREF(msg);
            goto fail;
        }
        if (o >= end) {
            Py_DECREF(offset);
            Py_DECREF(msg);
            break;
        }
        PyObject *value = call0(msg, S_VALUE);
        PyObject *headers = value ? call0(msg, S_HEADERS) : NULL;
        Py_DECREF(msg);
        int r = headers ? 1 : -1;
        if (r == 1 && (seen == NULL || (r = PyObject_RichCompareBool(headers, seen, Py_EQ)) == 0)) {
            PyObject *got = PyObject_CallOneArg(classify, headers);
            r = -1;
            if (got != NULL && PyTuple_Check(got) && PyTuple_GET_SIZE(got) == 2) {
                Py_XSETREF(seen, Py_NewRef(headers));
                Py_XSETREF(encoding, Py_NewRef(PyTuple_GET_ITEM(got, 0)));
                kinds = kinds_of(PyTuple_GET_ITEM(got, 1));
                r = 1;
            } else if (got != NULL) {
                PyErr_SetString(PyExc_TypeError, "append_records: classify must return a pair");
            }
            Py_XDECREF(got);
        }
        int kind = 0;
        PyObject *source = NULL, *text = NULL;
        unsigned long long ts = 0;
        if (r == 1) {
            r = 0;
            if (kinds && PyBytes_Check(value)) {
                const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(value);
                Py_ssize_t len = PyBytes_GET_SIZE(value);
                /* No encoding header: decode sniffs, JSON when the value starts with "{". */
                if (!(encoding == Py_None && len > 0 && p[0] == '{'))
                    r = read_record(p, len, kinds, &kind, &source, &ts, &text);
            }
        }
        if (r == 1) {
            PyObject *ts_obj = PyLong_FromUnsignedLongLong(ts);
            PyObject *items[9] = {topic, partition, offset, kind == 1 ? K_ROW_NAME : K_RESOLVED_NAME,
                                  source, ts_obj, encoding, value, text};
            r = ts_obj == NULL ? -1 : append_row(lists, items);
            Py_XDECREF(ts_obj);
            if (r == 0) r = 1;
        }
        Py_XDECREF(source);
        Py_XDECREF(text);
        Py_DECREF(offset);
        Py_XDECREF(value);
        Py_XDECREF(headers);
        if (r < 0) goto fail;
        if (r == 0) break; /* the caller reads this one itself */
    }
    Py_XDECREF(seen);
    Py_XDECREF(encoding);
    return PyLong_FromSsize_t(i);
fail:
    Py_XDECREF(seen);
    Py_XDECREF(encoding);
    return NULL;
}

static PyMethodDef methods[] = {
    {"render", render, METH_VARARGS,
     "render(kinds, ints, uints, doubles, strings, blobs) -> the image's SQL literals joined by "
     "NUL, or None when the Python renderer must do it."},
    {"row_text", row_text, METH_O,
     "row_text(value) -> (source, ts, rendered_row text) of a protobuf row record, or None when "
     "Python must decode it (any other record, a field or value this parser leaves to Python, "
     "a corrupt value)."},
    {"append_records", append_records, METH_VARARGS,
     "append_records(msgs, i, end, cols, topic, partition, classify) -> the index of the first "
     "message from msgs[i] on that it did not append to the nine column lists `cols` (one with an "
     "error, at or past offset `end`, or one the caller must read: not a protobuf row or "
     "Resolved this parser takes whole); len(msgs) when it appended them all. "
     "classify(headers) -> (encoding column, kind header: '' none, None the caller reads it), "
     "asked once per distinct headers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "rowbus.spark_apply._literals",
    "SQL literals from a row image's wire columns (see _literals.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__literals(void) {
    crc_init();
    S_ERROR = PyUnicode_InternFromString("error");
    S_OFFSET = PyUnicode_InternFromString("offset");
    S_VALUE = PyUnicode_InternFromString("value");
    S_HEADERS = PyUnicode_InternFromString("headers");
    K_ROW_NAME = PyUnicode_InternFromString("row");
    K_RESOLVED_NAME = PyUnicode_InternFromString("resolved");
    if (!S_ERROR || !S_OFFSET || !S_VALUE || !S_HEADERS || !K_ROW_NAME || !K_RESOLVED_NAME)
        return NULL;
    return PyModule_Create(&module);
}
