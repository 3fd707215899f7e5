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
    PyObject *values[ncols > 0 ? ncols : 1];
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
            if (v && cols[got].post) Py_SETREF(v, PyObject_CallOneArg(cols[got].post, v));
            if (!v) goto fail;
        }
        values[got] = v;
    }
    PyObject *t = PyTuple_New(got);
    if (!t) goto fail;
    for (Py_ssize_t i = 0; i < got; i++) PyTuple_SET_ITEM(t, i, values[i]);
    return t;
fail:
    for (Py_ssize_t i = 0; i < got; i++) Py_DECREF(values[i]);
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
        if (cols[i].kind >= K_CALL_BYTES && !PyCallable_Check(cols[i].call)) {
            PyErr_SetString(PyExc_TypeError, "a generic column needs a callable");
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

PyMODINIT_FUNC PyInit__resultset(void) { return PyModule_Create(&module); }
