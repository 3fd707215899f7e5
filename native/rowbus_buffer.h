/* The growable byte buffer the native extensions write their output into: the reader's record
 * encoder (producer/_rows.c) and the apply job's SQL literal renderer (spark_apply/_literals.c).
 *
 * Header-only (static inline), so each extension stays one translation unit and setup.py builds
 * it with `include_dirs=["native"]`. A buffer starts as {NULL, 0, 0}; its owner frees `p` with
 * PyMem_Free. Both calls return 0, or -1 with MemoryError set.
 */
#ifndef ROWBUS_BUFFER_H
#define ROWBUS_BUFFER_H

#include <Python.h>
#include <string.h>

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} RowbusBuffer;

/* Room for `need` more bytes: the capacity doubles from 256, so appends are amortized O(1). */
static inline int buf_grow(RowbusBuffer *b, Py_ssize_t need) {
    if (b->len + need <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + need) cap *= 2;
    char *p = PyMem_Realloc(b->p, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

/* Appends `n` bytes from `s`. */
static inline int buf_put(RowbusBuffer *b, const void *s, Py_ssize_t n) {
    if (n == 0) return 0;
    if (buf_grow(b, n) < 0) return -1;
    memcpy(b->p + b->len, s, (size_t)n);
    b->len += n;
    return 0;
}

#endif
