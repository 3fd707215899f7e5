/* rowbus.producer.snapshot._resultset: a text-protocol result set's rows, read in bulk.
 *
 * pymysql reads a result row by row in Python (a packet object, a method call per column, a
 * decode and a converter call per value): most of a snapshot's time. Here the raw bytes the
 * server sent are parsed many rows per call into exactly the tuples pymysql's
 * `_read_row_from_packet` builds with the same (encoding, converter) per column, then each
 * non-NULL value is passed through the snapshot's own converter of its column, if any
 * (rowbus.producer.snapshot.values). `rowbus.producer.snapshot.resultset` drives it and
 * `tests/integration/snapshot/test_values.py` compares both ways on the fidelity corpus.
 *
 * rows(buf, pos, seq, columns, out) -> (pos, seq, status, error)
 *   buf: bytes-like; pos: where the next packet starts; seq: its expected sequence id;
 *   columns: a tuple of (kind, call, post) per column (see enum Kind; `call` only for the
 *   generic kinds, `post` a callable or None); out: a list the rows are appended to.
 *   status 0: buf holds no further whole packet (read more, call again from pos);
 *   1: the result's end (EOF packet) was read; 2: an error packet, `error` its payload.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum Kind {
    K_BYTES = 0,      /* binary: kept as bytes */
    K_UTF8 = 1,       /* text in the connection's utf8mb4 */
    K_ASCII = 2,      /* a non-text type without converter (temporal kept as text) */
    K_INT = 3,        /* int(ascii) */
    K_FLOAT = 4,      /* float(ascii) */
    K_DECIMAL = 5,    /* Decimal(ascii) */
    K_CALL_BYTES = 6, /* call(bytes) */
    K_CALL_UTF8 = 7,  /* call(utf8 text) */
    K_CALL_ASCII = 8, /* call(ascii text) */
    /* Temporal text: a valid date/time built here, anything else (zero dates, a day the
     * month lacks) left to `post`, which then receives the ascii text. */
    K_DATE = 9,
    K_DATETIME = 10,
    K_TIMESTAMP = 11, /* a datetime in UTC (the session's time zone) */
};

#define MAX_PACKET 0xFFFFFF

static PyObject *Decimal = NULL;

typedef struct {
    int kind;
    PyObject *call; /* borrowed */
    PyObject *post; /* borrowed, NULL for none */
} Col;

/* A length-encoded integer at *p; -1 when it runs past end, -2 for NULL (0xFB). */
static int64_t lenenc(const uint8_t **p, const uint8_t *end) {
    if (*p >= end) return -1;
    uint8_t first = **p;
    (*p)++;
    if (first < 0xFB) return first;
    if (first == 0xFB) return -2;
    int n = first == 0xFC ? 2 : first == 0xFD ? 3 : first == 0xFE ? 8 : 0;
    if (n == 0 || end - *p < n) return -1;
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | (*p)[i];
    *p += n;
    return v > (uint64_t)INT64_MAX ? -1 : (int64_t)v;
}

static PyObject *parse_int(const char *s, Py_ssize_t n) {
    /* Up to 18 digits fit an int64 whatever they are; longer ones go through Python. */
    Py_ssize_t i = 0;
    int negative = 0;
    if (n > 0 && (s[0] == '-' || s[0] == '+')) {
        negative = s[0] == '-';
        i = 1;
    }
    if (n - i > 0 && n - i <= 18) {
        int64_t v = 0;
        Py_ssize_t j = i;
        for (; j < n && s[j] >= '0' && s[j] <= '9'; j++) v = v * 10 + (s[j] - '0');
        if (j == n) return PyLong_FromLongLong(negative ? -v : v);
    }
    PyObject *text = PyUnicode_DecodeASCII(s, n, "strict");
    if (!text) return NULL;
    PyObject *v = PyLong_FromUnicodeObject(text, 10);
    Py_DECREF(text);
    return v;
}

static PyObject *parse_float(const char *s, Py_ssize_t n) {
    PyObject *text = PyUnicode_DecodeASCII(s, n, "strict");
    if (!text) return NULL;
    PyObject *v = PyFloat_FromString(text);
    Py_DECREF(text);
    return v;
}

static int digits(const char *s, int n, int *out) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 1;
}

/* "YYYY-MM-DD[ HH:MM:SS[.f{1,6}]]" as a date (kind K_DATE) or a datetime; NULL without an
 * exception when the text is anything else or not a valid date. */
static PyObject *temporal(int kind, const char *s, Py_ssize_t n) {
    int y, mo, d, h = 0, mi = 0, se = 0, us = 0;
    if (n < 10 || s[4] != '-' || s[7] != '-' || !digits(s, 4, &y) || !digits(s + 5, 2, &mo) ||
        !digits(s + 8, 2, &d) || y == 0 || mo == 0 || d == 0)
        return NULL;
    if (kind == K_DATE) {
        if (n != 10) return NULL;
    } else {
        if (n < 19 || s[10] != ' ' || s[13] != ':' || s[16] != ':' || !digits(s + 11, 2, &h) ||
            !digits(s + 14, 2, &mi) || !digits(s + 17, 2, &se))
            return NULL;
        if (n > 19) {
            int f = (int)(n - 20);
            if (s[19] != '.' || f < 1 || f > 6 || !digits(s + 20, f, &us)) return NULL;
            for (; f < 6; f++) us *= 10;
        }
    }
    PyObject *v;
    if (kind == K_DATE)
        v = PyDate_FromDate(y, mo, d);
    else
        v = PyDateTimeAPI->DateTime_FromDateAndTime(
            y, mo, d, h, mi, se, us, kind == K_TIMESTAMP ? PyDateTime_TimeZone_UTC : Py_None,
            PyDateTimeAPI->DateTimeType);
    if (!v && PyErr_ExceptionMatches(PyExc_ValueError)) PyErr_Clear();
    return v;
}

static PyObject *value(const Col *col, const char *s, Py_ssize_t n) {
    PyObject *v = NULL, *arg = NULL;
    switch (col->kind) {
    case K_BYTES: return PyBytes_FromStringAndSize(s, n);
    case K_UTF8: return PyUnicode_DecodeUTF8(s, n, "strict");
    case K_ASCII: return PyUnicode_DecodeASCII(s, n, "strict");
    case K_INT: return parse_int(s, n);
    case K_FLOAT: return parse_float(s, n);
    case K_DECIMAL:
        arg = PyUnicode_DecodeASCII(s, n, "strict");
        if (!arg) return NULL;
        v = PyObject_CallOneArg(Decimal, arg);
        Py_DECREF(arg);
        return v;
    case K_CALL_BYTES: arg = PyBytes_FromStringAndSize(s, n); break;
    case K_CALL_UTF8: arg = PyUnicode_DecodeUTF8(s, n, "strict"); break;
    case K_CALL_ASCII: arg = PyUnicode_DecodeASCII(s, n, "strict"); break;
    case K_DATE:
    case K_DATETIME:
    case K_TIMESTAMP:
        v = temporal(col->kind, s, n);
        if (v || PyErr_Occurred()) return v;
        arg = PyUnicode_DecodeASCII(s, n, "strict");
        if (!arg) return NULL;
        v = PyObject_CallOneArg(col->post, arg);
        Py_DECREF(arg);
        return v;
    default:
        PyErr_Format(PyExc_ValueError, "unknown column kind %d", col->kind);
        return NULL;
    }
    if (!arg) return NULL;
    v = PyObject_CallOneArg(col->call, arg);
    Py_DECREF(arg);
    return v;
}

/* One row's tuple from its payload. Like pymysql, a row with fewer values than columns ends
 * where its values end. */
static PyObject *row(const Col *cols, Py_ssize_t ncols, const uint8_t *p, const uint8_t *end) {
    /* The values go straight into a tuple, cut to the values read: a stack array of ncols
     * pointers (as this was) overflows the stack on a wide enough column tuple. */
    PyObject *t = PyTuple_New(ncols);
    if (!t) return NULL;
    Py_ssize_t got = 0;
    for (; got < ncols && p < end; got++) {
        int64_t n = lenenc(&p, end);
        PyObject *v;
        if (n == -2) {
            v = Py_NewRef(Py_None);
        } else {
            if (n < 0 || end - p < n) {
                PyErr_SetString(PyExc_ValueError, "a row value runs past its packet");
                goto fail;
            }
            v = value(&cols[got], (const char *)p, (Py_ssize_t)n);
            p += n;
            if (v && cols[got].post && cols[got].kind < K_DATE) Py_SETREF(v, PyObject_CallOneArg(cols[got].post, v));
            if (!v) goto fail;
        }
        PyTuple_SET_ITEM(t, got, v);
    }
    if (got < ncols && _PyTuple_Resize(&t, got) < 0) return NULL;
    return t;
fail:
    Py_DECREF(t); /* the unset items are NULL, which the tuple's dealloc skips */
    return NULL;
}

static int read_columns(PyObject *columns, Col *cols, Py_ssize_t ncols) {
    for (Py_ssize_t i = 0; i < ncols; i++) {
        PyObject *spec = PyTuple_GET_ITEM(columns, i);
        if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 3) {
            PyErr_SetString(PyExc_TypeError, "a column is (kind, call, post)");
            return -1;
        }
        cols[i].kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 0));
        if (cols[i].kind == -1 && PyErr_Occurred()) return -1;
        cols[i].call = PyTuple_GET_ITEM(spec, 1);
        PyObject *post = PyTuple_GET_ITEM(spec, 2);
        cols[i].post = post == Py_None ? NULL : post;
        if (cols[i].kind >= K_CALL_BYTES && cols[i].kind <= K_CALL_ASCII &&
            !PyCallable_Check(cols[i].call)) {
            PyErr_SetString(PyExc_TypeError, "a generic column needs a callable");
            return -1;
        }
        if (cols[i].kind >= K_DATE && !cols[i].post) {
            PyErr_SetString(PyExc_TypeError, "a temporal column needs its converter");
            return -1;
        }
    }
    return 0;
}

static PyObject *rows(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos;
    int seq;
    PyObject *columns, *out;
    if (!PyArg_ParseTuple(args, "y*niO!O!", &view, &pos, &seq, &PyTuple_Type, &columns,
                          &PyList_Type, &out))
        return NULL;
    PyObject *result = NULL, *error = NULL;
    uint8_t *joined = NULL;
    Py_ssize_t ncols = PyTuple_GET_SIZE(columns);
    Col *cols = PyMem_Malloc(sizeof(Col) * (ncols > 0 ? ncols : 1));
    if (!cols) {
        PyErr_NoMemory();
        goto done;
    }
    if (read_columns(columns, cols, ncols) < 0) goto done;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        if (cols[i].kind == K_DECIMAL && !Decimal) {
            /* PyObject_CallOneArg(NULL, ...) would dereference it */
            PyErr_SetString(PyExc_RuntimeError, "_resultset.configure(Decimal) was not called");
            goto done;
        }
    }
    const uint8_t *data = view.buf;
    Py_ssize_t len = view.len;
    if (pos < 0 || pos > len) {
        PyErr_SetString(PyExc_ValueError, "pos out of range");
        goto done;
    }
    int status = 0;
    while (status == 0) {
        /* A payload of 2^24-1 bytes continues in the next packet: find the whole of it. */
        Py_ssize_t at = pos, total = 0, parts = 0;
        int next = seq, whole = 0;
        while (len - at >= 4) {
            Py_ssize_t size = data[at] | data[at + 1] << 8 | data[at + 2] << 16;
            if (data[at + 3] != next) {
                PyErr_Format(PyExc_ConnectionError,
                             "packet sequence number wrong: got %d, expected %d",
                             data[at + 3], next);
                goto done;
            }
            if (len - at - 4 < size) break;
            next = (next + 1) & 0xFF;
            total += size;
            parts++;
            at += 4 + size;
            if (size < MAX_PACKET) {
                whole = 1;
                break;
            }
        }
        if (!whole) break;
        const uint8_t *payload = data + pos + 4;
        if (parts > 1) {
            joined = PyMem_Realloc(joined, total > 0 ? total : 1);
            if (!joined) {
                PyErr_NoMemory();
                goto done;
            }
            Py_ssize_t off = 0;
            for (Py_ssize_t q = pos; q < at;) {
                Py_ssize_t size = data[q] | data[q + 1] << 8 | data[q + 2] << 16;
                memcpy(joined + off, data + q + 4, size);
                off += size;
                q += 4 + size;
            }
            payload = joined;
        }
        if (total > 0 && payload[0] == 0xFF) {
            error = PyBytes_FromStringAndSize((const char *)payload, total);
            if (!error) goto done;
            status = 2;
        } else if (total > 0 && total < 9 && payload[0] == 0xFE) {
            status = 1;
        } else {
            PyObject *t = row(cols, ncols, payload, payload + total);
            if (!t || PyList_Append(out, t) < 0) {
                Py_XDECREF(t);
                goto done;
            }
            Py_DECREF(t);
        }
        pos = at;
        seq = next;
    }
    result = Py_BuildValue("(niiO)", pos, seq, status, error ? error : Py_None);
done:
    Py_XDECREF(error);
    PyMem_Free(joined);
    PyMem_Free(cols);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *configure(PyObject *self, PyObject *arg) {
    Py_XSETREF(Decimal, Py_NewRef(arg));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"rows", rows, METH_VARARGS,
     "rows(buf, pos, seq, columns, out) -> (pos, seq, status, error): the whole row packets of "
     "buf from pos appended to out as tuples; status 0 more to read, 1 end, 2 error packet"},
    {"configure", configure, METH_O, "configure(Decimal)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_resultset", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__resultset(void) {
    PyDateTime_IMPORT;
    if (!PyDateTimeAPI) return NULL;
    return PyModule_Create(&module);
}
