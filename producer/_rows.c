/* rowbus.producer._rows: the reader's fast path from a binlog rows-event body to row images.
 *
 * `decode(data, start, end, mode, ncols, present1, present2, plan)` reads every row of one
 * WRITE/UPDATE/DELETE rows event from data[start:end] (the bytes after the event's header and
 * its columns-present bitmaps) and returns a list of (before, after) tuples of protocol values.
 * It produces exactly what the pure-Python path (mysql-replication with rowbus.producer.values)
 * produces; `plan` says per column how (see rowbus.producer.fastrows, which builds it and
 * leaves a table to the pure path when one of its column types is not covered here).
 *
 * Whatever this code cannot read as the pure path would (bytes running past the event, a
 * negative DATETIME2, an ENUM index out of range, a text that does not decode, ...) makes
 * `decode` return None: the caller then decodes that event with the pure path, which raises or
 * answers as it always did. So the two paths can only differ where both return values.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <stdint.h>
#include <string.h>

#include "rowbus_buffer.h"

enum Kind {
    K_SINT = 0,     /* a: bytes (1, 2, 3, 4, 8), little-endian, signed */
    K_UINT = 1,     /* a: bytes, little-endian, unsigned */
    K_FLOAT = 2,
    K_DOUBLE = 3,
    K_DECIMAL = 4,  /* a: precision, b: scale */
    K_BYTES = 5,    /* a: length bytes, b: pad to (BINARY(n)) or 0 */
    K_UTF8 = 6,     /* a: length bytes */
    K_TEXT = 7,     /* a: length bytes, obj: decode(bytes) -> str */
    K_DATE = 8,
    K_DATETIME2 = 9,  /* a: fsp */
    K_TIMESTAMP2 = 10, /* a: fsp */
    K_TIME2 = 11,     /* a: fsp */
    K_YEAR = 12,
    K_SET = 13,     /* a: bytes, obj: members */
    K_BIT = 14,     /* a: bytes */
    K_ENUM = 15,    /* a: bytes, obj: the library's enum_values (index 0 is '') or None */
};

typedef struct {
    int kind;
    int a;
    int b;
    PyObject *obj; /* borrowed from the plan tuple */
} Col;

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} Cursor;

static PyObject *Decimal = NULL;  /* decimal.Decimal */
static PyObject *ZeroDate = NULL; /* rowbus.protocol.values.ZeroDate */

static const int FRAC_UNIT[4] = {0, 10000, 100, 1};
static const int DIG2BYTES[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};

/* Returns 0 and sets no exception when the event runs short: the caller answers None. */
#define NEED(c, n) do { if ((c)->end - (c)->p < (Py_ssize_t)(n)) return NULL; } while (0)

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint64_t be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* mysql-replication's read_int_be_by_size for 1..4 bytes: big-endian, signed. */
static int64_t be_signed(const uint8_t *p, int n) {
    uint64_t v = be(p, n);
    int bits = 8 * n;
    if (v & ((uint64_t)1 << (bits - 1))) return (int64_t)v - ((int64_t)1 << bits);
    return (int64_t)v;
}

static int days_in(int y, int m) {
    static const int dim[13] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)) return 29;
    return dim[m];
}

static int valid_date(int y, int m, int d) {
    return y >= 1 && y <= 9999 && m >= 1 && m <= 12 && d >= 1 && d <= days_in(y, m);
}

/* ZeroDate(text), the text as rowbus.producer.values._zero_text writes it. */
static PyObject *zero_date(long y, long m, long d, int clock, long hh, long mi, long ss,
                           long us, int fsp) {
    char text[96];
    int n = snprintf(text, sizeof text, "%04ld-%02ld-%02ld", y, m, d);
    if (clock) {
        n += snprintf(text + n, sizeof text - n, " %02ld:%02ld:%02ld", hh, mi, ss);
        if (fsp) {
            char frac[32];
            snprintf(frac, sizeof frac, "%06ld", us);
            frac[fsp] = '\0';
            n += snprintf(text + n, sizeof text - n, ".%s", frac);
        }
    }
    return PyObject_CallFunction(ZeroDate, "s", text);
}

static PyObject *read_length_coded(Cursor *c, int size, Py_ssize_t *len, const uint8_t **at) {
    NEED(c, size);
    uint64_t n = le(c->p, size);
    c->p += size;
    /* Compared unsigned: NEED's signed cast let a length of 2^63 or more pass as negative. */
    if (n > (uint64_t)(c->end - c->p)) return NULL;
    *at = c->p;
    *len = (Py_ssize_t)n;
    c->p += n;
    return Py_None; /* a non-NULL marker, not a new reference */
}

static PyObject *read_decimal(Cursor *c, int precision, int scale) {
    int integral = precision - scale;
    int uncomp_int = integral / 9, uncomp_frac = scale / 9;
    int comp_int = integral - uncomp_int * 9, comp_frac = scale - uncomp_frac * 9;
    int total = DIG2BYTES[comp_int] + uncomp_int * 4 + uncomp_frac * 4 + DIG2BYTES[comp_frac];
    NEED(c, total);
    uint8_t buf[64];
    if (total > (int)sizeof buf || total < 1) return NULL;
    memcpy(buf, c->p, total);
    c->p += total;
    int64_t mask = (buf[0] & 0x80) ? 0 : -1;
    char text[160];
    int n = 0;
    if (mask) text[n++] = '-';
    buf[0] ^= 0x80;
    const uint8_t *p = buf;
    int size = DIG2BYTES[comp_int];
    if (size > 0) {
        n += snprintf(text + n, sizeof text - n, "%lld", (long long)(be_signed(p, size) ^ mask));
        p += size;
    }
    for (int i = 0; i < uncomp_int; i++, p += 4)
        n += snprintf(text + n, sizeof text - n, "%09lld", (long long)(be_signed(p, 4) ^ mask));
    /* The plan's precision (at most 65 digits) keeps the text far below its buffer; checked
     * anyway, since snprintf's return is what would be written and `sizeof text - n` wraps. */
    if (n >= (int)sizeof text - 64) return NULL;
    text[n++] = '.';
    for (int i = 0; i < uncomp_frac; i++, p += 4)
        n += snprintf(text + n, sizeof text - n, "%09lld", (long long)(be_signed(p, 4) ^ mask));
    size = DIG2BYTES[comp_frac];
    if (size > 0)
        n += snprintf(text + n, sizeof text - n, "%0*lld", comp_frac,
                      (long long)(be_signed(p, size) ^ mask));
    if (n >= (int)sizeof text) return NULL;
    return PyObject_CallFunction(Decimal, "s#", text, (Py_ssize_t)n);
}

static long fraction(Cursor *c, int fsp, int *ok) {
    int n = (fsp + 1) / 2;
    *ok = 1;
    if (!n) return 0;
    if (c->end - c->p < n) { *ok = 0; return 0; }
    long us = (long)be(c->p, n) * FRAC_UNIT[n];
    c->p += n;
    return us;
}

/* Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm). */
static void civil(int64_t z, int *y, int *m, int *d) {
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t yy = yoe + era * 400;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = (int)(yy + (*m <= 2));
}

static PyObject *read_value(Cursor *c, const Col *col) {
    const uint8_t *at;
    Py_ssize_t len;
    int ok;
    switch (col->kind) {
    case K_SINT: {
        int n = col->a;
        NEED(c, n);
        uint64_t v = le(c->p, n);
        c->p += n;
        int64_t s = n == 8 ? (int64_t)v
                           : ((v & ((uint64_t)1 << (8 * n - 1))) ? (int64_t)v - ((int64_t)1 << (8 * n))
                                                                 : (int64_t)v);
        return PyLong_FromLongLong(s);
    }
    case K_UINT: {
        NEED(c, col->a);
        uint64_t v = le(c->p, col->a);
        c->p += col->a;
        return PyLong_FromUnsignedLongLong(v);
    }
    case K_FLOAT: {
        NEED(c, 4);
        float f;
        memcpy(&f, c->p, 4);
        c->p += 4;
        return PyFloat_FromDouble((double)f);
    }
    case K_DOUBLE: {
        NEED(c, 8);
        double f;
        memcpy(&f, c->p, 8);
        c->p += 8;
        return PyFloat_FromDouble(f);
    }
    case K_DECIMAL:
        return read_decimal(c, col->a, col->b);
    case K_BYTES: {
        if (!read_length_coded(c, col->a, &len, &at)) return NULL;
        if (col->b > len) {
            PyObject *out = PyBytes_FromStringAndSize(NULL, col->b);
            if (!out) return NULL;
            memcpy(PyBytes_AS_STRING(out), at, len);
            memset(PyBytes_AS_STRING(out) + len, 0, col->b - len);
            return out;
        }
        return PyBytes_FromStringAndSize((const char *)at, len);
    }
    case K_UTF8:
        if (!read_length_coded(c, col->a, &len, &at)) return NULL;
        return PyUnicode_DecodeUTF8((const char *)at, len, "strict");
    case K_TEXT: {
        if (!read_length_coded(c, col->a, &len, &at)) return NULL;
        PyObject *raw = PyBytes_FromStringAndSize((const char *)at, len);
        if (!raw) return NULL;
        PyObject *out = PyObject_CallOneArg(col->obj, raw);
        Py_DECREF(raw);
        return out;
    }
    case K_DATE: {
        NEED(c, 3);
        long v = (long)le(c->p, 3);
        c->p += 3;
        int y = (int)(v >> 9), m = (int)((v >> 5) & 15), d = (int)(v & 31);
        if (valid_date(y, m, d)) return PyDate_FromDate(y, m, d);
        return zero_date(y, m, d, 0, 0, 0, 0, 0, 0);
    }
    case K_DATETIME2: {
        NEED(c, 5);
        int64_t v = (int64_t)be(c->p, 5) - 0x8000000000LL;
        c->p += 5;
        long us = fraction(c, col->a, &ok);
        if (!ok || v < 0) return NULL; /* negative: left to the pure path */
        int64_t ymd = v >> 17, hms = v & 0x1FFFF;
        int64_t ym = ymd >> 5;
        int d = (int)(ymd & 31), y = (int)(ym / 13), m = (int)(ym % 13);
        int hh = (int)(hms >> 12), mi = (int)((hms >> 6) & 63), ss = (int)(hms & 63);
        if (valid_date(y, m, d) && hh <= 23 && mi <= 59 && ss <= 59 && us <= 999999)
            return PyDateTime_FromDateAndTime(y, m, d, hh, mi, ss, (int)us);
        return zero_date(y, m, d, 1, hh, mi, ss, us, col->a);
    }
    case K_TIMESTAMP2: {
        NEED(c, 4);
        int64_t seconds = (int64_t)be(c->p, 4);
        c->p += 4;
        long us = fraction(c, col->a, &ok);
        if (!ok) return NULL;
        if (seconds == 0) return zero_date(0, 0, 0, 1, 0, 0, 0, us, col->a);
        /* _EPOCH + timedelta(seconds=s, microseconds=us): us may carry into the seconds. */
        seconds += us / 1000000;
        us %= 1000000;
        int y, m, d;
        civil(seconds / 86400, &y, &m, &d);
        int64_t rem = seconds % 86400;
        if (y > 9999) return NULL;
        return PyDateTimeAPI->DateTime_FromDateAndTime(
            y, m, d, (int)(rem / 3600), (int)(rem / 60 % 60), (int)(rem % 60), (int)us,
            PyDateTime_TimeZone_UTC, PyDateTimeAPI->DateTimeType);
    }
    case K_TIME2: {
        int n = (col->a + 1) / 2;
        int bits = 8 * n;
        NEED(c, 3 + n);
        int64_t v = (int64_t)be(c->p, 3 + n) - ((int64_t)0x800000 << bits);
        c->p += 3 + n;
        int64_t a = v < 0 ? -v : v;
        int64_t packed = a >> bits, frac = a & (((int64_t)1 << bits) - 1);
        int64_t hh = (packed >> 12) & 0x3FF, mi = (packed >> 6) & 63, ss = packed & 63;
        int64_t secs = (hh * 60 + mi) * 60 + ss;
        int64_t fus = frac * FRAC_UNIT[n];
        secs += fus / 1000000;
        fus %= 1000000;
        if (v < 0) { secs = -secs; fus = -fus; }
        return PyDateTimeAPI->Delta_FromDelta(0, (int)secs, (int)fus, 1,
                                              PyDateTimeAPI->DeltaType);
    }
    case K_YEAR: {
        NEED(c, 1);
        long y = c->p[0];
        c->p += 1;
        return PyLong_FromLong(y ? y + 1900 : 0);
    }
    case K_SET: {
        NEED(c, col->a);
        uint64_t mask = le(c->p, col->a);
        c->p += col->a;
        PyObject *members = PyList_New(0);
        if (!members) return NULL;
        Py_ssize_t count = PyTuple_GET_SIZE(col->obj);
        for (Py_ssize_t i = 0; i < count && i < 64; i++) {
            if ((mask >> i) & 1) {
                if (PyList_Append(members, PyTuple_GET_ITEM(col->obj, i)) < 0) {
                    Py_DECREF(members);
                    return NULL;
                }
            }
        }
        PyObject *out = PyFrozenSet_New(members);
        Py_DECREF(members);
        return out;
    }
    case K_BIT: {
        NEED(c, col->a);
        uint64_t v = be(c->p, col->a);
        c->p += col->a;
        return PyLong_FromUnsignedLongLong(v);
    }
    case K_ENUM: {
        NEED(c, col->a);
        uint64_t i = le(c->p, col->a);
        c->p += col->a;
        if (col->obj == Py_None) Py_RETURN_NONE;
        if (i >= (uint64_t)PyTuple_GET_SIZE(col->obj)) return NULL;
        PyObject *out = PyTuple_GET_ITEM(col->obj, (Py_ssize_t)i);
        Py_INCREF(out);
        return out;
    }
    }
    return NULL;
}

static int popcount_bytes(const uint8_t *p, Py_ssize_t n) {
    int count = 0;
    for (Py_ssize_t i = 0; i < n; i++) count += __builtin_popcount(p[i]);
    return count;
}

/* One image; NULL (with or without an exception set) when it cannot be read. */
static PyObject *read_image(Cursor *c, const uint8_t *present, Py_ssize_t present_len,
                            const Col *cols, Py_ssize_t ncols) {
    Py_ssize_t null_len = (popcount_bytes(present, present_len) + 7) / 8;
    NEED(c, null_len);
    const uint8_t *nulls = c->p;
    c->p += null_len;
    PyObject *image = PyTuple_New(ncols);
    if (!image) return NULL;
    Py_ssize_t ni = 0;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        PyObject *v;
        if (!((present[i >> 3] >> (i & 7)) & 1)) {
            v = Py_NewRef(Py_None);
        } else {
            int is_null = (nulls[ni >> 3] >> (ni & 7)) & 1;
            ni++;
            if (is_null) {
                v = Py_NewRef(Py_None);
            } else {
                v = read_value(c, &cols[i]);
                if (!v) {
                    Py_DECREF(image);
                    return NULL;
                }
            }
        }
        PyTuple_SET_ITEM(image, i, v);
    }
    return image;
}

/* Whether read_value can read a column of this spec within its buffers. The plan comes from
 * the binlog's table map (fastrows.plan_for): a corrupt one can carry a scale above its
 * precision, an fsp over 6 or a length of 8 bytes, which index the tables above out of range
 * or wrap the cursor. Outside MySQL's domain the event is left to the pure path. */
static int in_domain(const Col *col) {
    int a = col->a, b = col->b;
    switch (col->kind) {
    case K_SINT:
    case K_UINT:
        return a == 1 || a == 2 || a == 3 || a == 4 || a == 8;
    case K_FLOAT:
    case K_DOUBLE:
    case K_DATE:
    case K_YEAR:
        return 1;
    case K_DECIMAL:
        return a >= 1 && a <= 65 && b >= 0 && b <= 30 && b <= a;
    case K_BYTES:
        return a >= 1 && a <= 4 && b >= 0 && b <= 0xFFFF;
    case K_UTF8:
    case K_TEXT:
        return a >= 1 && a <= 4;
    case K_DATETIME2:
    case K_TIMESTAMP2:
    case K_TIME2:
        return a >= 0 && a <= 6;
    case K_SET:
    case K_BIT:
    case K_ENUM:
        return a >= 1 && a <= 8;
    }
    return 0;
}

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer data, p1, p2;
    Py_ssize_t start, end, ncols;
    int mode; /* 0 write, 1 delete, 2 update */
    PyObject *plan;
    if (!PyArg_ParseTuple(args, "y*nninz*z*O!", &data, &start, &end, &mode, &ncols, &p1, &p2,
                          &PyTuple_Type, &plan))
        return NULL;
    PyObject *rows = NULL;
    Col *cols = NULL;
    if (start < 0 || end > data.len || start > end || PyTuple_GET_SIZE(plan) != ncols ||
        p1.buf == NULL || p1.len * 8 < ncols || (mode == 2 && (p2.buf == NULL || p2.len * 8 < ncols)))
        goto fallback;
    cols = PyMem_Malloc(sizeof(Col) * (ncols ? ncols : 1));
    if (!cols) goto error;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        PyObject *spec = PyTuple_GET_ITEM(plan, i);
        if (!PyArg_ParseTuple(spec, "iiiO", &cols[i].kind, &cols[i].a, &cols[i].b, &cols[i].obj))
            goto error;
        if ((cols[i].kind == K_SET && !PyTuple_Check(cols[i].obj)) ||
            (cols[i].kind == K_ENUM && cols[i].obj != Py_None && !PyTuple_Check(cols[i].obj))) {
            PyErr_SetString(PyExc_TypeError, "SET members and ENUM values must be tuples");
            goto error;
        }
        if (!in_domain(&cols[i])) goto fallback;
    }
    rows = PyList_New(0);
    if (!rows) goto error;
    Cursor c = {(const uint8_t *)data.buf + start, (const uint8_t *)data.buf + end};
    while (c.p < c.end) {
        /* A row that reads no byte (no column present, no NULL bitmap) would be read again
         * forever, a row more each time, until memory ran out. */
        const uint8_t *row_start = c.p;
        PyObject *first = read_image(&c, p1.buf, p1.len, cols, ncols);
        if (!first) goto failed;
        PyObject *pair;
        if (mode == 2) {
            PyObject *second = read_image(&c, p2.buf, p2.len, cols, ncols);
            if (!second) {
                Py_DECREF(first);
                goto failed;
            }
            pair = PyTuple_Pack(2, first, second);
            Py_DECREF(second);
        } else if (mode == 1) {
            pair = PyTuple_Pack(2, first, Py_None);
        } else {
            pair = PyTuple_Pack(2, Py_None, first);
        }
        Py_DECREF(first);
        if (pair && c.p == row_start) {
            Py_DECREF(pair);
            goto fallback;
        }
        if (!pair || PyList_Append(rows, pair) < 0) {
            Py_XDECREF(pair);
            goto error;
        }
        Py_DECREF(pair);
    }
    PyMem_Free(cols);
    PyBuffer_Release(&data);
    PyBuffer_Release(&p1);
    PyBuffer_Release(&p2);
    return rows;
failed:
    /* Unreadable here: None, unless memory ran out. */
    if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_MemoryError)) goto error;
    PyErr_Clear();
fallback:
    Py_XDECREF(rows);
    PyMem_Free(cols);
    PyBuffer_Release(&data);
    PyBuffer_Release(&p1);
    PyBuffer_Release(&p2);
    Py_RETURN_NONE;
error:
    Py_XDECREF(rows);
    PyMem_Free(cols);
    PyBuffer_Release(&data);
    PyBuffer_Release(&p1);
    PyBuffer_Release(&p2);
    return NULL;
}

/* ---- protocol records: a RowChange Envelope serialized as rowbus.protocol.codec.pb does ---- */

/* The record being written (native/rowbus_buffer.h). */
typedef RowbusBuffer Out;

static int put_varint(Out *o, uint64_t v) {
    if (buf_grow(o, 10) < 0) return -1;
    while (v >= 0x80) {
        o->p[o->len++] = (char)(v | 0x80);
        v >>= 7;
    }
    o->p[o->len++] = (char)v;
    return 0;
}

static int put_fixed64(Out *o, int tag, uint64_t v) {
    uint8_t b[9];
    b[0] = (uint8_t)tag;
    for (int i = 0; i < 8; i++) b[1 + i] = (uint8_t)(v >> (8 * i));
    return buf_put(o, b, 9);
}

static int put_bytes(Out *o, int tag, const char *p, Py_ssize_t n) {
    if (put_varint(o, (uint64_t)tag) < 0 || put_varint(o, (uint64_t)n) < 0) return -1;
    return buf_put(o, p, n);
}

/* A str field (always written: callers skip empty proto3 strings themselves). */
static int put_str(Out *o, int tag, PyObject *s) {
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(s, &n);
    if (!p) return -1;
    return put_bytes(o, tag, p, n);
}

static int put_str_nonempty(Out *o, int tag, PyObject *s) {
    if (!PyUnicode_Check(s)) {
        PyErr_SetString(PyExc_TypeError, "expected str");
        return -1;
    }
    if (PyUnicode_GET_LENGTH(s) == 0) return 0;
    return put_str(o, tag, s);
}

static int put_u64(Out *o, int tag, PyObject *v, int always) {
    uint64_t n = PyLong_AsUnsignedLongLong(v);
    if (n == (uint64_t)-1 && PyErr_Occurred()) return -1;
    if (!n && !always) return 0;
    if (put_varint(o, (uint64_t)tag) < 0) return -1;
    return put_varint(o, n);
}

/* Opens a length-delimited field: writes the tag, reserves the length, returns its offset. */
static Py_ssize_t open_field(Out *o, int tag) {
    if (put_varint(o, (uint64_t)tag) < 0 || buf_grow(o, 5) < 0) return -1;
    Py_ssize_t at = o->len;
    o->len += 5; /* a 5-byte varint slot, compacted in close_field */
    return at;
}

static int close_field(Out *o, Py_ssize_t at) {
    Py_ssize_t body = o->len - at - 5;
    uint8_t len[5];
    int n = 0;
    uint64_t v = (uint64_t)body;
    while (v >= 0x80) {
        len[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    len[n++] = (uint8_t)v;
    memmove(o->p + at + n, o->p + at + 5, body);
    memcpy(o->p + at, len, n);
    o->len = at + n + body;
    return 0;
}

/* Image: kinds, ints (packed sint64), uints (packed), doubles (packed), strings, blobs. */
static int put_image(Out *o, int tag, PyObject *cols) {
    if (!PyTuple_Check(cols) || PyTuple_GET_SIZE(cols) != 6) {
        PyErr_SetString(PyExc_TypeError, "an image is a Columns tuple");
        return -1;
    }
    Py_ssize_t at = open_field(o, tag);
    if (at < 0) return -1;
    PyObject *kinds = PyTuple_GET_ITEM(cols, 0);
    char *kp;
    Py_ssize_t kn;
    if (PyBytes_AsStringAndSize(kinds, &kp, &kn) < 0) return -1;
    if (kn && put_bytes(o, 0x0A, kp, kn) < 0) return -1;
    for (int field = 1; field <= 5; field++) {
        PyObject *seq = PyTuple_GET_ITEM(cols, field);
        PyObject *fast = PySequence_Fast(seq, "image arrays are sequences");
        if (!fast) return -1;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
        PyObject **items = PySequence_Fast_ITEMS(fast);
        int rc = 0;
        if (n == 0) {
            Py_DECREF(fast);
            continue;
        }
        if (field <= 3) { /* packed */
            Py_ssize_t inner = open_field(o, ((field + 1) << 3) | 2);
            if (inner < 0) rc = -1;
            for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
                if (field == 1) {
                    long long v = PyLong_AsLongLong(items[i]);
                    if (v == -1 && PyErr_Occurred()) rc = -1;
                    else rc = put_varint(o, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
                } else if (field == 2) {
                    uint64_t v = PyLong_AsUnsignedLongLong(items[i]);
                    if (v == (uint64_t)-1 && PyErr_Occurred()) rc = -1;
                    else rc = put_varint(o, v);
                } else {
                    double d = PyFloat_AsDouble(items[i]);
                    if (d == -1.0 && PyErr_Occurred()) rc = -1;
                    else {
                        uint64_t bits;
                        memcpy(&bits, &d, 8);
                        uint8_t b[8];
                        for (int k = 0; k < 8; k++) b[k] = (uint8_t)(bits >> (8 * k));
                        rc = buf_put(o, b, 8);
                    }
                }
            }
            if (rc == 0) close_field(o, inner);
        } else if (field == 4) {
            for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
                if (!PyUnicode_Check(items[i])) {
                    PyErr_SetString(PyExc_TypeError, "strings must be str");
                    rc = -1;
                } else {
                    rc = put_str(o, 0x2A, items[i]);
                }
            }
        } else {
            for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
                char *p;
                Py_ssize_t len;
                if (PyBytes_AsStringAndSize(items[i], &p, &len) < 0) rc = -1;
                else rc = put_bytes(o, 0x32, p, len);
            }
        }
        Py_DECREF(fast);
        if (rc < 0) return -1;
    }
    return close_field(o, at);
}

/* ---- an image of values straight to a protobuf Image (rowbus.protocol.codec.image.split) ---- */

enum WireKind { W_NULL = 0, W_INT = 1, W_UINT = 2, W_DOUBLE = 3, W_DECIMAL = 4, W_STRING = 5,
                W_BYTES = 6, W_DATE = 7, W_DATETIME = 8, W_TIMESTAMP = 9, W_TIME = 10 };

#define TIME_MAX_US 3020399999999LL /* 838:59:59.999999 */
#define US_PER_DAY 86400000000LL

static int64_t days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* Kind of one value and, for the ints kinds, its integer; 0 when the value is not one this
 * code vouches for (the caller then leaves the record to the protocol's own encoder). */
static int classify(PyObject *v, uint8_t *kind, int64_t *i) {
    if (v == Py_None) { *kind = W_NULL; return 1; }
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyLong_Type) {
        int overflow;
        long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (n == -1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
        if (overflow == 0) { *kind = W_INT; *i = n; return 1; }
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(v);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
            *kind = W_UINT;
            return 1;
        }
        return 0;
    }
    if (t == &PyUnicode_Type) { *kind = W_STRING; return 1; }
    if (t == &PyBytes_Type) { *kind = W_BYTES; return 1; }
    if (t == &PyFloat_Type) {
        double d = PyFloat_AS_DOUBLE(v);
        if (d - d != 0.0) return 0; /* NaN, infinities */
        *kind = W_DOUBLE;
        return 1;
    }
    if (t == (PyTypeObject *)Decimal) { *kind = W_DECIMAL; return 1; }
    if (t == PyDateTimeAPI->DateTimeType) {
        PyObject *tz = PyDateTime_DATE_GET_TZINFO(v);
        if (tz != Py_None && tz != PyDateTime_TimeZone_UTC) return 0;
        *kind = tz == Py_None ? W_DATETIME : W_TIMESTAMP;
        *i = days_from_civil(PyDateTime_GET_YEAR(v), PyDateTime_GET_MONTH(v),
                             PyDateTime_GET_DAY(v)) * US_PER_DAY +
             ((int64_t)PyDateTime_DATE_GET_HOUR(v) * 3600 +
              PyDateTime_DATE_GET_MINUTE(v) * 60 + PyDateTime_DATE_GET_SECOND(v)) * 1000000LL +
             PyDateTime_DATE_GET_MICROSECOND(v);
        return 1;
    }
    if (t == PyDateTimeAPI->DateType) {
        *kind = W_DATE;
        *i = days_from_civil(PyDateTime_GET_YEAR(v), PyDateTime_GET_MONTH(v), PyDateTime_GET_DAY(v));
        return 1;
    }
    if (t == PyDateTimeAPI->DeltaType) {
        int64_t us = (int64_t)PyDateTime_DELTA_GET_DAYS(v) * US_PER_DAY +
                     (int64_t)PyDateTime_DELTA_GET_SECONDS(v) * 1000000LL +
                     PyDateTime_DELTA_GET_MICROSECONDS(v);
        if (us < -TIME_MAX_US || us > TIME_MAX_US) return 0;
        *kind = W_TIME;
        *i = us;
        return 1;
    }
    return 0; /* SET, ZeroDate, bool, subclasses, foreign types */
}

/* 1 written, 0 not vouched for (nothing useful written), -1 error. */
static int put_values_image(Out *o, int tag, PyObject *image) {
    if (!PyTuple_Check(image)) return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(image);
    uint8_t kinds_small[64];
    int64_t ints_small[64];
    uint8_t *kinds = kinds_small;
    int64_t *ints = ints_small;
    PyObject *decimals[64];
    int rc = -1, nints = 0, nuints = 0, ndoubles = 0, nstrings = 0, nblobs = 0;
    if (n > 64 || n == 0) return 0;
    for (Py_ssize_t c = 0; c < n; c++) decimals[c] = NULL;
    for (Py_ssize_t c = 0; c < n; c++) {
        PyObject *v = PyTuple_GET_ITEM(image, c);
        int64_t i = 0;
        if (!classify(v, &kinds[c], &i)) { rc = 0; goto done; }
        ints[c] = i;
        switch (kinds[c]) {
        case W_INT: case W_DATE: case W_DATETIME: case W_TIMESTAMP: case W_TIME: nints++; break;
        case W_UINT: nuints++; break;
        case W_DOUBLE: ndoubles++; break;
        case W_STRING: nstrings++; break;
        case W_BYTES: nblobs++; break;
        case W_DECIMAL: {
            PyObject *text = PyObject_Str(v);
            if (!text) goto done;
            decimals[c] = text;
            Py_ssize_t len;
            const char *p = PyUnicode_AsUTF8AndSize(text, &len);
            if (!p) goto done;
            if (len && *p == '-') { p++; len--; }
            if (!len || *p < '0' || *p > '9') { rc = 0; goto done; } /* NaN, Infinity */
            nstrings++;
            break;
        }
        }
    }
    Py_ssize_t at = open_field(o, tag);
    if (at < 0) goto done;
    if (put_bytes(o, 0x0A, (const char *)kinds, n) < 0) goto done;
    if (nints) {
        Py_ssize_t f = open_field(o, 0x12);
        if (f < 0) goto done;
        for (Py_ssize_t c = 0; c < n; c++) {
            uint8_t k = kinds[c];
            if (k == W_INT || k == W_DATE || k == W_DATETIME || k == W_TIMESTAMP || k == W_TIME) {
                int64_t v = ints[c];
                if (put_varint(o, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63)) < 0) goto done;
            }
        }
        close_field(o, f);
    }
    if (nuints) {
        Py_ssize_t f = open_field(o, 0x1A);
        if (f < 0) goto done;
        for (Py_ssize_t c = 0; c < n; c++)
            if (kinds[c] == W_UINT &&
                put_varint(o, PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(image, c))) < 0)
                goto done;
        close_field(o, f);
    }
    if (ndoubles) {
        Py_ssize_t f = open_field(o, 0x22);
        if (f < 0) goto done;
        for (Py_ssize_t c = 0; c < n; c++) {
            if (kinds[c] != W_DOUBLE) continue;
            double d = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(image, c));
            uint64_t bits;
            memcpy(&bits, &d, 8);
            uint8_t b[8];
            for (int k = 0; k < 8; k++) b[k] = (uint8_t)(bits >> (8 * k));
            if (buf_put(o, b, 8) < 0) goto done;
        }
        close_field(o, f);
    }
    for (Py_ssize_t c = 0; c < n && nstrings; c++) {
        if (kinds[c] == W_STRING) {
            if (put_str(o, 0x2A, PyTuple_GET_ITEM(image, c)) < 0) goto done;
        } else if (kinds[c] == W_DECIMAL) {
            if (put_str(o, 0x2A, decimals[c]) < 0) goto done;
        }
    }
    for (Py_ssize_t c = 0; c < n && nblobs; c++) {
        if (kinds[c] != W_BYTES) continue;
        PyObject *b = PyTuple_GET_ITEM(image, c);
        if (put_bytes(o, 0x32, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b)) < 0) goto done;
    }
    close_field(o, at);
    rc = 1;
done:
    for (Py_ssize_t c = 0; c < n; c++) Py_XDECREF(decimals[c]);
    if (rc == -1 && PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_MemoryError)) {
        PyErr_Clear(); /* a str that is not UTF-8, ...: the protocol's encoder says what */
        rc = 0;
    }
    return rc;
}

/* row_change(source, ts, op, schema, table, schema_id, primary_key, before, after,
 *            txn_id, index, count, file, offset, gtid, raw=False) -> the Envelope's bytes (no
 * trailer). The images are Columns (rowbus.protocol.codec.image), or with raw=True tuples of
 * values, split here; then None when a value is not one this code vouches for. */
static PyObject *encode_change(PyObject *source, PyObject *ts, PyObject *op, PyObject *schema,
                               PyObject *table, PyObject *schema_id, PyObject *pk,
                               PyObject *before, PyObject *after, PyObject *txn_id,
                               PyObject *index, PyObject *count, PyObject *file,
                               PyObject *offset, PyObject *gtid, int raw);

static PyObject *row_change(PyObject *self, PyObject *args) {
    PyObject *source, *ts, *op, *schema, *table, *schema_id, *pk, *before, *after;
    PyObject *txn_id, *index, *count, *file, *offset, *gtid;
    int raw = 0;
    if (!PyArg_ParseTuple(args, "UOOUUOO!OOUOOUOO|p", &source, &ts, &op, &schema, &table,
                          &schema_id, &PyTuple_Type, &pk, &before, &after, &txn_id, &index,
                          &count, &file, &offset, &gtid, &raw))
        return NULL;
    return encode_change(source, ts, op, schema, table, schema_id, pk, before, after, txn_id,
                         index, count, file, offset, gtid, raw);
}

static PyObject *encode_change(PyObject *source, PyObject *ts, PyObject *op, PyObject *schema,
                               PyObject *table, PyObject *schema_id, PyObject *pk,
                               PyObject *before, PyObject *after, PyObject *txn_id,
                               PyObject *index, PyObject *count, PyObject *file,
                               PyObject *offset, PyObject *gtid, int raw) {
    Out o = {NULL, 0, 0};
    Py_ssize_t row = open_field(&o, 0x0A);
    if (row < 0) goto error;
    if (put_str_nonempty(&o, 0x0A, source) < 0) goto error;
    uint64_t v = PyLong_AsUnsignedLongLong(ts);
    if (v == (uint64_t)-1 && PyErr_Occurred()) goto error;
    if (v && put_fixed64(&o, 0x11, v) < 0) goto error;
    if (put_u64(&o, 0x18, op, 0) < 0) goto error;
    if (put_str_nonempty(&o, 0x22, schema) < 0 || put_str_nonempty(&o, 0x2A, table) < 0)
        goto error;
    v = PyLong_AsUnsignedLongLong(schema_id);
    if (v == (uint64_t)-1 && PyErr_Occurred()) goto error;
    if (v && put_fixed64(&o, 0x31, v) < 0) goto error;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pk); i++) {
        PyObject *name = PyTuple_GET_ITEM(pk, i);
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "primary key names must be str");
            goto error;
        }
        if (put_str(&o, 0x3A, name) < 0) goto error;
    }
    if (raw) {
        /* images of values: None when one holds a value left to the protocol's encoder */
        int done = 1;
        if (before != Py_None) done = put_values_image(&o, 0x42, before);
        if (done == 1 && after != Py_None) done = put_values_image(&o, 0x4A, after);
        if (done < 0) goto error;
        if (done == 0) {
            PyMem_Free(o.p);
            Py_RETURN_NONE;
        }
    } else {
        if (before != Py_None && put_image(&o, 0x42, before) < 0) goto error;
        if (after != Py_None && put_image(&o, 0x4A, after) < 0) goto error;
    }
    Py_ssize_t txn = open_field(&o, 0x52);
    if (txn < 0 || put_str_nonempty(&o, 0x0A, txn_id) < 0 || put_u64(&o, 0x10, index, 0) < 0)
        goto error;
    if (count != Py_None && put_u64(&o, 0x18, count, 1) < 0) goto error;
    close_field(&o, txn);
    Py_ssize_t pos = open_field(&o, 0x5A);
    if (pos < 0 || put_str_nonempty(&o, 0x0A, file) < 0 || put_u64(&o, 0x10, offset, 0) < 0)
        goto error;
    if (gtid != Py_None) {
        if (!PyUnicode_Check(gtid)) {
            PyErr_SetString(PyExc_TypeError, "gtid must be str");
            goto error;
        }
        if (put_str(&o, 0x1A, gtid) < 0) goto error;
    }
    close_field(&o, pos);
    close_field(&o, row);
    PyObject *out = PyBytes_FromStringAndSize(o.p, o.len);
    PyMem_Free(o.p);
    return out;
error:
    PyMem_Free(o.p);
    return NULL;
}

static uint32_t murmur2_of(const char *data, Py_ssize_t length);

/* Kafka's Utils.murmur2 (as rowbus.protocol.partition.murmur2): a signed 32-bit int. */
static PyObject *murmur2(PyObject *self, PyObject *arg) {
    char *data;
    Py_ssize_t length;
    if (PyBytes_AsStringAndSize(arg, &data, &length) < 0) return NULL;
    return PyLong_FromLong((long)(int32_t)murmur2_of(data, length));
}

static uint32_t murmur2_of(const char *data, Py_ssize_t length) {
    const uint32_t m = 0x5BD1E995;
    const uint8_t *p = (const uint8_t *)data;
    uint32_t h = 0x9747B28C ^ (uint32_t)length;
    Py_ssize_t n4 = length / 4;
    for (Py_ssize_t i = 0; i < n4; i++) {
        uint32_t k = (uint32_t)p[4 * i] | ((uint32_t)p[4 * i + 1] << 8) |
                     ((uint32_t)p[4 * i + 2] << 16) | ((uint32_t)p[4 * i + 3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    Py_ssize_t base = n4 * 4;
    switch (length & 3) {
    case 3: h ^= (uint32_t)p[base + 2] << 16; /* fall through */
    case 2: h ^= (uint32_t)p[base + 1] << 8; /* fall through */
    case 1:
        h ^= p[base];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

/* zlib.crc32 (the Envelope's trailer, rowbus.protocol.codec): Python's own, whose zlib is
 * much faster than a byte-at-a-time table; set by configure. */
static PyObject *crc32_fn = NULL;

/* row_record(topic, headers, prefix, at, partitions, source, ts, op, schema, table, schema_id,
 *            primary_key, before, after, txn_id, index, count, file, offset, gtid)
 * -> (topic, partition, key, value, headers): a row's whole record (rowbus.producer.batch)
 * in one call, for a table keyed by one integer column (image position `at`): the key is
 * `prefix` + the integer + "]" (fastrows.int_key), the partition Kafka's murmur2 of it, the
 * value row_change's bytes with raw images and the Envelope's trailer (0x7D, crc32). None
 * when the key is not such an integer or a value is not one row_change vouches for. */
static PyObject *row_record(PyObject *self, PyObject *args) {
    PyObject *topic, *headers, *prefix;
    Py_ssize_t at, partitions;
    PyObject *source, *ts, *op, *schema, *table, *schema_id, *pk, *before, *after;
    PyObject *txn_id, *index, *count, *file, *offset, *gtid;
    if (!PyArg_ParseTuple(args, "OOO!nnUOOUUOO!OOUOOUOO", &topic, &headers, &PyBytes_Type,
                          &prefix, &at, &partitions, &source, &ts, &op, &schema, &table,
                          &schema_id, &PyTuple_Type, &pk, &before, &after, &txn_id, &index,
                          &count, &file, &offset, &gtid))
        return NULL;
    if (partitions <= 0 || !crc32_fn) {
        PyErr_SetString(PyExc_ValueError, "partitions must be positive (and configure done)");
        return NULL;
    }
    PyObject *image = after != Py_None ? after : before;
    if (!PyTuple_Check(image) || at < 0 || at >= PyTuple_GET_SIZE(image)) Py_RETURN_NONE;
    PyObject *v = PyTuple_GET_ITEM(image, at);
    if (Py_TYPE(v) != &PyLong_Type) Py_RETURN_NONE;
    char digits[32];
    int overflow;
    long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (overflow == 0) {
        snprintf(digits, sizeof digits, "%lld", n);
    } else if (overflow > 0) {
        unsigned long long u = PyLong_AsUnsignedLongLong(v);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            Py_RETURN_NONE; /* above UINT64_MAX */
        }
        snprintf(digits, sizeof digits, "%llu", u);
    } else {
        Py_RETURN_NONE; /* below INT64_MIN */
    }
    PyObject *body = encode_change(source, ts, op, schema, table, schema_id, pk, before, after,
                                   txn_id, index, count, file, offset, gtid, 1);
    if (!body || body == Py_None) return body;
    Py_ssize_t plen = PyBytes_GET_SIZE(prefix), dlen = (Py_ssize_t)strlen(digits);
    PyObject *key = PyBytes_FromStringAndSize(NULL, plen + dlen + 1);
    Py_ssize_t blen = PyBytes_GET_SIZE(body);
    PyObject *value = key ? PyBytes_FromStringAndSize(NULL, blen + 5) : NULL;
    if (!value) {
        Py_XDECREF(key);
        Py_DECREF(body);
        return NULL;
    }
    char *k = PyBytes_AS_STRING(key);
    memcpy(k, PyBytes_AS_STRING(prefix), plen);
    memcpy(k + plen, digits, dlen);
    k[plen + dlen] = ']';
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(value);
    memcpy(out, PyBytes_AS_STRING(body), blen);
    PyObject *sum = PyObject_CallOneArg(crc32_fn, body);
    Py_DECREF(body);
    uint32_t crc = sum ? (uint32_t)PyLong_AsUnsignedLong(sum) : 0;
    Py_XDECREF(sum);
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        Py_DECREF(value);
        return NULL;
    }
    out[blen] = 0x7D;
    for (int i = 0; i < 4; i++) out[blen + 1 + i] = (uint8_t)(crc >> (8 * i));
    uint32_t h = murmur2_of(k, plen + dlen + 1);
    long partition = (long)((h & 0x7FFFFFFFu) % (uint32_t)partitions);
    PyObject *p = PyLong_FromLong(partition);
    if (!p) {
        Py_DECREF(key);
        Py_DECREF(value);
        return NULL;
    }
    PyObject *record = PyTuple_New(5);
    if (!record) {
        Py_DECREF(p);
        Py_DECREF(key);
        Py_DECREF(value);
        return NULL;
    }
    PyTuple_SET_ITEM(record, 0, Py_NewRef(topic));
    PyTuple_SET_ITEM(record, 1, p);
    PyTuple_SET_ITEM(record, 2, key);
    PyTuple_SET_ITEM(record, 3, value);
    PyTuple_SET_ITEM(record, 4, Py_NewRef(headers));
    return record;
}

/* split_packets(buf, pos) -> (payloads, pos): the binlog dump stream's packets in `buf` from
 * `pos` (rowbus.producer.dumpframes), each an event's payload (OK byte first), up to the first
 * packet that is not whole in `buf`, is continued (2^24-1 bytes), or is not an OK packet:
 * those the caller frames itself from the returned position. */
static PyObject *split_packets(PyObject *self, PyObject *args) {
    PyObject *buf;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "O!n", &PyBytes_Type, &buf, &pos)) return NULL;
    const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(buf);
    Py_ssize_t len = PyBytes_GET_SIZE(buf);
    if (pos < 0 || pos > len) {
        PyErr_SetString(PyExc_ValueError, "pos out of range");
        return NULL;
    }
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    while (len - pos >= 4) {
        Py_ssize_t size = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16;
        if (size == 0xFFFFFF || size == 0 || len - pos - 4 < size || data[pos + 4] != 0x00)
            break;
        PyObject *payload = PyBytes_FromStringAndSize((const char *)data + pos + 4, size);
        if (!payload || PyList_Append(out, payload) < 0) {
            Py_XDECREF(payload);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(payload);
        pos += 4 + size;
    }
    return Py_BuildValue("(Nn)", out, pos);
}

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *decimal, *zero, *crc32 = NULL;
    if (!PyArg_ParseTuple(args, "OO|O", &decimal, &zero, &crc32)) return NULL;
    Py_XSETREF(Decimal, Py_NewRef(decimal));
    Py_XSETREF(ZeroDate, Py_NewRef(zero));
    if (crc32) Py_XSETREF(crc32_fn, Py_NewRef(crc32));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS,
     "decode(data, start, end, mode, ncols, present1, present2, plan) -> list of "
     "(before, after) images, or None when the pure-Python path must read this event"},
    {"row_change", row_change, METH_VARARGS,
     "row_change(source, ts, op, schema, table, schema_id, primary_key, before, after, txn_id, "
     "index, count, file, offset, gtid) -> a RowChange Envelope's bytes, without the trailer"},
    {"row_record", row_record, METH_VARARGS,
     "row_record(topic, headers, prefix, at, partitions, <row_change's 15 arguments>) -> "
     "(topic, partition, key, value, headers), or None when the row takes another path"},
    {"split_packets", split_packets, METH_VARARGS,
     "split_packets(buf, pos) -> (payloads, pos): the whole OK packets of buf from pos"},
    {"murmur2", murmur2, METH_O, "murmur2(key) -> Kafka's murmur2 of key, a signed int"},
    {"configure", configure, METH_VARARGS, "configure(Decimal, ZeroDate[, crc32]): the value classes, the trailer's checksum"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rows", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__rows(void) {
    PyDateTime_IMPORT;
    if (!PyDateTimeAPI) return NULL;
    return PyModule_Create(&module);
}
