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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum {
    K_NULL = 0, K_INT = 1, K_UINT = 2, K_DOUBLE = 3, K_DECIMAL = 4, K_STRING = 5, K_BYTES = 6,
    K_DATE = 7, K_DATETIME = 8, K_TIMESTAMP = 9, K_TIME = 10, K_SET = 11, K_ZERO_DATE = 12,
};

#define US_PER_DAY 86400000000LL
#define TIME_MAX_US 3020399999999LL /* 838:59:59.999999 */
/* Days from 1970-01-01 to 0001-01-01 and to 9999-12-31 (Python's date range). */
#define MIN_DAYS (-719162LL)
#define MAX_DAYS 2932896LL

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

static int grow(Buf *b, Py_ssize_t n) {
    if (b->len + n <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n) cap *= 2;
    char *p = PyMem_Realloc(b->p, (size_t)cap);
    if (p == NULL) { PyErr_NoMemory(); return -1; }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int put(Buf *b, const char *s, Py_ssize_t n) {
    if (grow(b, n) < 0) return -1;
    memcpy(b->p + b->len, s, (size_t)n);
    b->len += n;
    return 0;
}

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
    return put(b, s, n) < 0 ? -1 : 1;
}

static int put_datetime(Buf *b, long long us) {
    long long rest;
    long long days = floordiv(us, US_PER_DAY, &rest);
    if (days < MIN_DAYS || days > MAX_DAYS) return 0;
    if (put(b, "'", 1) < 0 || put_date(b, days, 0) < 0) return -1;
    long long secs = rest / 1000000, frac = rest % 1000000;
    char s[32];
    int n = snprintf(s, sizeof s, " %02lld:%02lld:%02lld", secs / 3600, secs / 60 % 60, secs % 60);
    if (frac) n += snprintf(s + n, sizeof s - (size_t)n, ".%06lld", frac);
    s[n++] = '\'';
    return put(b, s, n) < 0 ? -1 : 1;
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
    return put(b, s, n) < 0 ? -1 : 1;
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

static int put_escaped(Buf *b, const char *s, Py_ssize_t n) {
    /* pymysql's escape_string, on UTF-8 bytes (no multi-byte sequence holds these bytes). */
    if (grow(b, 2 * n + 2) < 0) return -1;
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

typedef struct {
    PyObject *seq; /* a list (PySequence_Fast) */
    Py_ssize_t i, n;
} Arr;

static int arr_init(Arr *a, PyObject *obj) {
    a->seq = PySequence_Fast(obj, "render: an image array must be a sequence");
    if (a->seq == NULL) return -1;
    a->i = 0;
    a->n = PySequence_Fast_GET_SIZE(a->seq);
    return 0;
}

static PyObject *arr_next(Arr *a) {
    return a->i < a->n ? PySequence_Fast_GET_ITEM(a->seq, a->i++) : NULL;
}

static int next_ll(Arr *a, long long *out) {
    PyObject *o = arr_next(a);
    if (o == NULL || !PyLong_CheckExact(o)) return 0;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) { PyErr_Clear(); return 0; }
    return 1;
}

static const char HEX[] = "0123456789abcdef";

/* 1: the whole image written; 0: not covered; -1: error. */
static int render_into(Buf *b, const unsigned char *kinds, Py_ssize_t nk, Arr *ints, Arr *uints,
                       Arr *doubles, Arr *strings, Arr *blobs) {
    for (Py_ssize_t k = 0; k < nk; k++) {
        if (k && put(b, "\0", 1) < 0) return -1;
        long long v;
        int r;
        PyObject *o;
        switch (kinds[k]) {
            case K_NULL:
                if (put(b, "NULL", 4) < 0) return -1;
                break;
            case K_INT: {
                if (!next_ll(ints, &v)) return 0;
                char s[24];
                if (put(b, s, snprintf(s, sizeof s, "%lld", v)) < 0) return -1;
                break;
            }
            case K_UINT: {
                o = arr_next(uints);
                if (o == NULL || !PyLong_CheckExact(o)) return 0;
                unsigned long long u = PyLong_AsUnsignedLongLong(o);
                if (PyErr_Occurred()) { PyErr_Clear(); return 0; }
                if (u <= (unsigned long long)INT64_MAX) return 0;
                char s[24];
                if (put(b, s, snprintf(s, sizeof s, "%llu", u)) < 0) return -1;
                break;
            }
            case K_DOUBLE: {
                o = arr_next(doubles);
                if (o == NULL || !PyFloat_CheckExact(o)) return 0;
                double d = PyFloat_AS_DOUBLE(o);
                if (!isfinite(d)) return 0;
                char *s = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
                if (s == NULL) return -1;
                r = put(b, s, (Py_ssize_t)strlen(s));
                PyMem_Free(s);
                if (r < 0) return -1;
                break;
            }
            case K_DECIMAL:
            case K_STRING:
            case K_ZERO_DATE: {
                o = arr_next(strings);
                if (o == NULL || !PyUnicode_CheckExact(o)) return 0;
                Py_ssize_t n;
                const char *s = PyUnicode_AsUTF8AndSize(o, &n);
                if (s == NULL) { PyErr_Clear(); return 0; }
                if (kinds[k] == K_STRING) {
                    if (put_escaped(b, s, n) < 0) return -1;
                } else if (kinds[k] == K_DECIMAL) {
                    if (!canonical_decimal(s, n)) return 0;
                    if (put(b, s, n) < 0) return -1;
                } else {
                    if (memchr(s, '\0', (size_t)n) != NULL) return 0;
                    if (put(b, "'", 1) < 0 || put(b, s, n) < 0 || put(b, "'", 1) < 0) return -1;
                }
                break;
            }
            case K_BYTES: {
                o = arr_next(blobs);
                if (o == NULL || !PyBytes_CheckExact(o)) return 0;
                Py_ssize_t n = PyBytes_GET_SIZE(o);
                const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(o);
                if (n == 0) {
                    if (put(b, "''", 2) < 0) return -1;
                    break;
                }
                if (grow(b, 2 * n + 3) < 0) return -1;
                char *w = b->p + b->len;
                *w++ = 'X';
                *w++ = '\'';
                for (Py_ssize_t i = 0; i < n; i++) {
                    *w++ = HEX[s[i] >> 4];
                    *w++ = HEX[s[i] & 15];
                }
                *w++ = '\'';
                b->len = w - b->p;
                break;
            }
            case K_DATE:
                if (!next_ll(ints, &v)) return 0;
                if ((r = put_date(b, v, 1)) <= 0) return r;
                break;
            case K_DATETIME:
            case K_TIMESTAMP: /* rendered as UTC wall clock, like a naive DATETIME */
                if (!next_ll(ints, &v)) return 0;
                if ((r = put_datetime(b, v)) <= 0) return r;
                break;
            case K_TIME:
                if (!next_ll(ints, &v)) return 0;
                if ((r = put_time(b, v)) <= 0) return r;
                break;
            default: /* K_SET (sorted members: left to Python) and unknown kinds */
                return 0;
        }
    }
    /* Every array consumed exactly, as decoding requires. */
    if (ints->i != ints->n || uints->i != uints->n || doubles->i != doubles->n ||
        strings->i != strings->n || blobs->i != blobs->n)
        return 0;
    return 1;
}

static PyObject *render(PyObject *self, PyObject *args) {
    PyObject *kinds_obj, *objs[5];
    if (!PyArg_ParseTuple(args, "OOOOOO:render", &kinds_obj, &objs[0], &objs[1], &objs[2],
                          &objs[3], &objs[4]))
        return NULL;
    Py_buffer kinds;
    if (PyObject_GetBuffer(kinds_obj, &kinds, PyBUF_SIMPLE) < 0) return NULL;
    Arr arrs[5] = {{0}};
    PyObject *result = NULL;
    Buf b = {NULL, 0, 0};
    int i, r = -1;
    for (i = 0; i < 5; i++)
        if (arr_init(&arrs[i], objs[i]) < 0) goto done;
    r = render_into(&b, (const unsigned char *)kinds.buf, kinds.len, &arrs[0], &arrs[1],
                    &arrs[2], &arrs[3], &arrs[4]);
    if (r == 1)
        result = PyUnicode_DecodeUTF8(b.p ? b.p : "", b.len, "strict");
    else if (r == 0)
        result = Py_NewRef(Py_None);
done:
    for (i = 0; i < 5; i++) Py_XDECREF(arrs[i].seq);
    PyBuffer_Release(&kinds);
    PyMem_Free(b.p);
    return result;
}

static PyMethodDef methods[] = {
    {"render", render, METH_VARARGS,
     "render(kinds, ints, uints, doubles, strings, blobs) -> the image's SQL literals joined by "
     "NUL, or None when the Python renderer must do it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "rowbus.spark_apply._literals",
    "SQL literals from a row image's wire columns (see _literals.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__literals(void) { return PyModule_Create(&module); }
