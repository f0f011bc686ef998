/* The one-pass FLTR extraction of whole_record.py, compiled (issue 16, decision P35).
 *
 * ``whole_record._fields`` reads every element of a 10,000-flight package through lxml's Python
 * proxies: a proxy, a tag string and a text string per element, then the dict work, about 45 us
 * a record. This module walks the same libxml2 tree in C, straight from the nodes lxml keeps
 * (``struct LxmlElement``, lxml's public C API, gives a proxy's node), and builds the very same
 * dicts with the same rules and the catalogue's own key strings, which ``whole_record.py`` hands
 * over once (``configure``).
 *
 * It decides even less than the Python pass: anything it does not plainly recognise (a
 * namespace, a comment, an entity reference, text in several nodes, a value to judge) makes it
 * answer None for that record, and the caller runs the Python pass, which gives its own answer
 * or its own None. So a record's fields never depend on whether this module was built;
 * tests/unit/test_whole_record.py holds the two equal on every record it has.
 *
 * The tree is only read, with the GIL held, while the caller holds the records (and so their
 * document) alive.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <libxml/tree.h>

/* lxml's public element struct (lxml/etree.h, ``cdef public class _Element``). */
typedef struct {
    PyObject_HEAD
    PyObject *doc;
    xmlNode *c_node;
    PyObject *tag;
} LxmlElementView;

/* The rules, from whole_record.py (``configure``). */
static PyObject *SCALARS;        /* name -> the catalogue's string */
static PyObject *KEYS;           /* group or object name -> the catalogue's string */
static PyObject *GROUPS;         /* name -> (seq or None, attrs, children, text, cap) */
static PyObject *OBJECTS;        /* name -> (attrs, children, text, enums) */
static PyObject *SKIPPED;        /* "FLID" */
static const char *SKIPPED_NAME; /* its UTF-8 */
static PyObject *DERIVED;        /* frozenset of keys left out */
static PyObject *PLAIN_SEQ;      /* "0".."999" -> int */
static PyObject *SEQ_FN;         /* sequence_value(raw) -> int | None */
static PyObject *ELEMENT_TYPE;   /* lxml.etree._Element */
static PyObject *TEXT_KEY;       /* "TEXT" */
static PyObject *EMPTY;          /* "" */

enum { OK = 0, UNDECIDED = 1, ABSENT = 2, FAILED = -1 };

/* --- names: a libxml2 name looked up in a table once per call ----------------------------------- */

#define CACHE_SLOTS 2048
typedef struct {
    const xmlChar *name[CACHE_SLOTS];
    PyObject *table[CACHE_SLOTS];
    PyObject *found[CACHE_SLOTS];          /* borrowed from the table; NULL: not in it */
} NameCache;

static PyObject *lookup_uncached(PyObject *table, const xmlChar *name, int *failed) {
    PyObject *tag = PyUnicode_FromString((const char *)name);
    if (tag == NULL) { *failed = 1; return NULL; }
    PyObject *found = PyDict_GetItemWithError(table, tag);
    Py_DECREF(tag);
    if (found == NULL && PyErr_Occurred()) *failed = 1;
    return found;
}

/* ``table.get(name)`` (borrowed; NULL: absent, or *failed on an error). libxml2 keeps a document's
 * names in a dictionary, so equal names share one pointer: a name is looked up in a table once a
 * call, and no string is made for it after that. */
static PyObject *lookup(NameCache *cache, PyObject *table, const xmlChar *name, int *failed) {
    size_t slot = (((size_t)name >> 3) ^ ((size_t)table >> 4)) & (CACHE_SLOTS - 1);
    for (int probe = 0; probe < 8; probe++, slot = (slot + 1) & (CACHE_SLOTS - 1)) {
        if (cache->name[slot] == name && cache->table[slot] == table) return cache->found[slot];
        if (cache->name[slot] == NULL) {
            PyObject *found = lookup_uncached(table, name, failed);
            if (!*failed) {
                cache->name[slot] = name;
                cache->table[slot] = table;
                cache->found[slot] = found;
            }
            return found;
        }
    }
    return lookup_uncached(table, name, failed);      /* a crowded slot: not cached */
}

/* --- sorted parts: a dict built once, with its keys in order --------------------------------- */

#define MAX_PARTS 256
typedef struct {
    Py_ssize_t n;
    PyObject *key[MAX_PARTS];              /* borrowed: the catalogue's strings */
    PyObject *value[MAX_PARTS];            /* owned */
} Parts;

static void parts_clear(Parts *parts) {
    for (Py_ssize_t i = 0; i < parts->n; i++) Py_DECREF(parts->value[i]);
    parts->n = 0;
}

/* ``a < b`` as str compares (code points): -1, 0 or 1. The catalogue's names are ASCII, compared
 * here by their bytes; anything else by Python. */
static int compare_str(PyObject *a, PyObject *b) {
    if (a == b) return 0;
    if (PyUnicode_IS_COMPACT_ASCII(a) && PyUnicode_IS_COMPACT_ASCII(b)) {
        Py_ssize_t la = PyUnicode_GET_LENGTH(a), lb = PyUnicode_GET_LENGTH(b);
        int c = memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)(la < lb ? la : lb));
        return c != 0 ? (c < 0 ? -1 : 1) : (la < lb ? -1 : la > lb);
    }
    return PyUnicode_Compare(a, b);
}

static int same_str(PyObject *a, PyObject *b) {
    return compare_str(a, b) == 0;
}

/* Appends a part whose key is known not to be there yet (the reference to value is taken). */
static int parts_add(Parts *parts, PyObject *key, PyObject *value) {
    if (parts->n == MAX_PARTS) { Py_DECREF(value); return UNDECIDED; }
    parts->key[parts->n] = key;
    parts->value[parts->n++] = value;
    return OK;
}

/* ``d[key] = value`` (the reference to value is taken): a key set again keeps its place and takes
 * the new value. UNDECIDED when there are more parts than room. */
static int parts_set(Parts *parts, PyObject *key, PyObject *value) {
    for (Py_ssize_t i = 0; i < parts->n; i++) {
        if (same_str(parts->key[i], key)) {
            Py_SETREF(parts->value[i], value);
            return OK;
        }
    }
    if (parts->n == MAX_PARTS) { Py_DECREF(value); return UNDECIDED; }
    parts->key[parts->n] = key;
    parts->value[parts->n++] = value;
    return OK;
}

/* The dict of the parts with the keys sorted (str order: code points), without the parts ``drop``
 * says to leave out; the parts are cleared. */
static PyObject *parts_dict(Parts *parts, int (*drop)(PyObject *key, PyObject *value, PyObject *arg), PyObject *arg) {
    for (Py_ssize_t i = 1; i < parts->n; i++) {          /* insertion sort: a few parts each */
        PyObject *key = parts->key[i], *value = parts->value[i];
        Py_ssize_t j = i;
        for (; j > 0 && compare_str(parts->key[j - 1], key) > 0; j--) {
            parts->key[j] = parts->key[j - 1];
            parts->value[j] = parts->value[j - 1];
        }
        parts->key[j] = key;
        parts->value[j] = value;
    }
    PyObject *dict = PyDict_New();
    for (Py_ssize_t i = 0; dict != NULL && i < parts->n; i++) {
        int dropped = drop != NULL ? drop(parts->key[i], parts->value[i], arg) : 0;
        if (dropped < 0 || (!dropped && PyDict_SetItem(dict, parts->key[i], parts->value[i]) < 0)) Py_CLEAR(dict);
    }
    parts_clear(parts);
    return dict;
}

/* --- texts ------------------------------------------------------------------------------------ */

static int is_ascii_space(unsigned char c) {
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* ``text.strip()`` of a node's UTF-8 content: ASCII whitespace cut here, anything else by str.strip. */
static PyObject *stripped(const xmlChar *content) {
    const unsigned char *s = content;
    size_t i = 0, j = strlen((const char *)s);
    while (i < j && is_ascii_space(s[i])) i++;
    while (j > i && is_ascii_space(s[j - 1])) j--;
    if (i == j) {
        Py_INCREF(EMPTY);
        return EMPTY;
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)s + i, (Py_ssize_t)(j - i), NULL);
    if (text == NULL || (s[i] < 0x80 && s[j - 1] < 0x80)) return text;
    PyObject *cut = PyObject_CallMethod(text, "strip", NULL);      /* Unicode whitespace at an edge */
    Py_DECREF(text);
    return cut;
}

/* lxml's ``.text``: the text nodes before the first other child. Sets *out to the one non-empty
 * content (NULL: none); UNDECIDED when the text is spread over nodes or an XInclude mark is met. */
static int own_text(xmlNode *first, const xmlChar **out) {
    *out = NULL;
    for (xmlNode *c = first; c != NULL; c = c->next) {
        if (c->type == XML_TEXT_NODE || c->type == XML_CDATA_SECTION_NODE) {
            if (c->content != NULL && c->content[0]) {
                if (*out != NULL) return UNDECIDED;
                *out = c->content;
            }
        } else if (c->type == XML_XINCLUDE_START || c->type == XML_XINCLUDE_END) {
            return UNDECIDED;
        } else {
            break;
        }
    }
    return OK;
}

/* Whether a node has a child other than text: lxml's ``len(node)`` (elements, comments,
 * processing instructions, entity references), or something this module leaves to Python. */
static int has_other_child(xmlNode *node) {
    for (xmlNode *c = node->children; c != NULL; c = c->next) {
        if (c->type != XML_TEXT_NODE && c->type != XML_CDATA_SECTION_NODE) return 1;
    }
    return 0;
}

/* --- one entry: ``whole_record._entry`` -------------------------------------------------------- */

/* A blank part, but for the sequence attribute (``arg``): ``_entry``'s filter of a blank entry. */
static int blank_part(PyObject *key, PyObject *value, PyObject *seq) {
    return PyUnicode_GET_LENGTH(value) == 0 && !(seq != Py_None && same_str(key, seq));
}

/* Sets *result to a new dict, *empty as ``_entry`` does. */
static int entry_of(NameCache *cache, xmlNode *el, PyObject *seq, PyObject *attrs, PyObject *children,
                    int text_allowed, PyObject **result, int *empty) {
    Parts parts;
    parts.n = 0;
    int blank = 0, status = OK, failed = 0;
    *empty = 1;
    for (xmlAttr *a = el->properties; a != NULL; a = a->next) {
        if (a->ns != NULL) { status = UNDECIDED; goto done; }
        const xmlChar *raw;
        if (a->children == NULL) {
            raw = (const xmlChar *)"";
        } else if (a->children->type == XML_TEXT_NODE && a->children->next == NULL) {
            raw = a->children->content != NULL ? a->children->content : (const xmlChar *)"";
        } else {
            status = UNDECIDED; goto done;
        }
        PyObject *name = lookup(cache, attrs, a->name, &failed);
        if (name == NULL) { status = failed ? FAILED : UNDECIDED; goto done; }
        PyObject *value = stripped(raw);
        if (value == NULL) { status = FAILED; goto done; }
        if (PyUnicode_GET_LENGTH(value)) *empty = 0; else blank = 1;
        if ((status = parts_set(&parts, name, value)) != OK) goto done;
    }
    for (xmlNode *c = el->children; c != NULL; c = c->next) {
        if (c->type == XML_TEXT_NODE || c->type == XML_CDATA_SECTION_NODE) continue;
        if (c->type != XML_ELEMENT_NODE || c->ns != NULL || has_other_child(c)) { status = UNDECIDED; goto done; }
        PyObject *name = lookup(cache, children, c->name, &failed);
        if (name == NULL) { status = failed ? FAILED : UNDECIDED; goto done; }
        const xmlChar *raw;
        if ((status = own_text(c->children, &raw)) != OK) goto done;
        PyObject *value;
        if (raw == NULL) {
            value = EMPTY;
            Py_INCREF(value);
        } else if ((value = stripped(raw)) == NULL) {
            status = FAILED; goto done;
        }
        if (!PyUnicode_GET_LENGTH(value)) blank = 1;
        if ((status = parts_set(&parts, name, value)) != OK) goto done;
        *empty = 0;
    }
    const xmlChar *own;
    if ((status = own_text(el->children, &own)) != OK) goto done;
    if (own != NULL) {
        PyObject *value = stripped(own);
        if (value == NULL) { status = FAILED; goto done; }
        if (PyUnicode_GET_LENGTH(value)) {
            if (!text_allowed) { Py_DECREF(value); status = UNDECIDED; goto done; }
            if ((status = parts_set(&parts, TEXT_KEY, value)) != OK) goto done;
            *empty = 0;
        } else {
            Py_DECREF(value);
        }
    }
    *result = parts_dict(&parts, blank ? blank_part : NULL, seq);
    return *result != NULL ? OK : FAILED;
done:
    parts_clear(&parts);
    return status;
}

/* --- groups and objects: ``whole_record._group`` and ``_object`` ------------------------------- */

/* The int of a sequence attribute, or -1 (not one). -2: an error is set. */
static long sequence_of(PyObject *entry, PyObject *seq) {
    PyObject *raw = PyDict_GetItemWithError(entry, seq);
    if (raw == NULL) {
        if (PyErr_Occurred()) return -2;
        raw = EMPTY;
    }
    PyObject *n = PyDict_GetItemWithError(PLAIN_SEQ, raw);
    if (n != NULL) return PyLong_AsLong(n);
    if (PyErr_Occurred()) return -2;
    PyObject *value = PyObject_CallOneArg(SEQ_FN, raw);
    if (value == NULL) return -2;
    long result = value == Py_None ? -1 : PyLong_AsLong(value);
    Py_DECREF(value);
    return result;
}

static int group_of(NameCache *cache, xmlNode **nodes, Py_ssize_t n, PyObject *rule, int frozen, PyObject **result) {
    PyObject *seq = PyTuple_GET_ITEM(rule, 0), *attrs = PyTuple_GET_ITEM(rule, 1);
    PyObject *children = PyTuple_GET_ITEM(rule, 2);
    int text_allowed = PyObject_IsTrue(PyTuple_GET_ITEM(rule, 3));
    Py_ssize_t cap = PyLong_AsSsize_t(PyTuple_GET_ITEM(rule, 4));
    if (text_allowed < 0 || (cap == -1 && PyErr_Occurred())) return FAILED;
    if (n > cap) return UNDECIDED;
    PyObject *entries = PyTuple_New(n);
    if (entries == NULL) return FAILED;
    int all_empty = 1, status;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry;
        int empty;
        if ((status = entry_of(cache, nodes[i], seq, attrs, children, text_allowed, &entry, &empty)) != OK) {
            Py_DECREF(entries);
            return status;
        }
        PyTuple_SET_ITEM(entries, i, entry);
        all_empty = all_empty && empty;
    }
    if (all_empty) { Py_DECREF(entries); return ABSENT; }
    if (seq != Py_None) {
        long numbers[n];
        int repeat_or_zero = 0, all_zero = 1;
        for (Py_ssize_t i = 0; i < n; i++) {
            long v = sequence_of(PyTuple_GET_ITEM(entries, i), seq);
            if (v < 0) { Py_DECREF(entries); return v == -2 || PyErr_Occurred() ? FAILED : UNDECIDED; }
            numbers[i] = v;
            if (v == 0) repeat_or_zero = 1; else all_zero = 0;
            for (Py_ssize_t j = 0; j < i; j++) {
                if (numbers[j] == v) repeat_or_zero = 1;
            }
        }
        if (repeat_or_zero) { Py_DECREF(entries); return all_zero ? ABSENT : UNDECIDED; }
    }
    if (frozen) {
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *view = PyDictProxy_New(PyTuple_GET_ITEM(entries, i));
            if (view == NULL) { Py_DECREF(entries); return FAILED; }
            Py_DECREF(PyTuple_GET_ITEM(entries, i));
            PyTuple_SET_ITEM(entries, i, view);
        }
    }
    *result = entries;
    return OK;
}

static int object_of(NameCache *cache, xmlNode **nodes, Py_ssize_t n, PyObject *rule, int frozen, PyObject **result) {
    if (n > 1) return UNDECIDED;
    PyObject *attrs = PyTuple_GET_ITEM(rule, 0), *children = PyTuple_GET_ITEM(rule, 1);
    PyObject *enums = PyTuple_GET_ITEM(rule, 3);
    int text_allowed = PyObject_IsTrue(PyTuple_GET_ITEM(rule, 2));
    if (text_allowed < 0) return FAILED;
    PyObject *value;
    int empty, status;
    if ((status = entry_of(cache, nodes[0], Py_None, attrs, children, text_allowed, &value, &empty)) != OK) return status;
    if (empty || PyDict_GET_SIZE(value) == 0) { Py_DECREF(value); return ABSENT; }
    PyObject *attr, *allowed;
    Py_ssize_t pos = 0;
    while (PyDict_Next(enums, &pos, &attr, &allowed)) {
        PyObject *v = PyDict_GetItemWithError(value, attr);
        if (v == NULL && PyErr_Occurred()) { Py_DECREF(value); return FAILED; }
        if (v != NULL && PyUnicode_GET_LENGTH(v)) {
            int known = PySequence_Contains(allowed, v);
            if (known <= 0) { Py_DECREF(value); return known < 0 ? FAILED : UNDECIDED; }
        }
    }
    if (frozen) {
        PyObject *view = PyDictProxy_New(value);
        Py_DECREF(value);
        if (view == NULL) return FAILED;
        value = view;
    }
    *result = value;
    return OK;
}

/* --- one record: ``whole_record._fields`` ------------------------------------------------------ */

#define MAX_GROUPED 1024

/* A key of the fields that msgx derives (``DERIVED``): left out. */
static int derived_part(PyObject *key, PyObject *value, PyObject *derived) {
    return PySet_Contains(derived, key);
}

static int record_fields(NameCache *cache, xmlNode *record, int frozen, PyObject **result) {
    xmlNode *grouped[MAX_GROUPED];
    PyObject *grouped_key[MAX_GROUPED];       /* borrowed: KEYS' own strings */
    PyObject *scalars[MAX_PARTS];             /* the scalars met (SCALARS' own strings) */
    Py_ssize_t ng = 0, ns = 0;
    int status = OK, failed = 0;
    Parts fields;
    fields.n = 0;
    for (xmlNode *child = record->children; child != NULL; child = child->next) {
        if (child->type == XML_TEXT_NODE || child->type == XML_CDATA_SECTION_NODE) continue;
        if (child->type != XML_ELEMENT_NODE || child->ns != NULL) { status = UNDECIDED; goto done; }
        PyObject *name = lookup(cache, SCALARS, child->name, &failed);
        if (name != NULL) {
            for (Py_ssize_t i = 0; i < ns; i++) {
                if (scalars[i] == name) { status = UNDECIDED; goto done; }     /* a repeated scalar */
            }
            if (ns == MAX_PARTS || child->properties != NULL || has_other_child(child)) { status = UNDECIDED; goto done; }
            scalars[ns++] = name;
            const xmlChar *raw;
            if ((status = own_text(child->children, &raw)) != OK) goto done;
            if (raw != NULL) {
                PyObject *text = stripped(raw);
                if (text == NULL) { status = FAILED; goto done; }
                if (!PyUnicode_GET_LENGTH(text)) {
                    Py_DECREF(text);
                } else if ((status = parts_add(&fields, name, text)) != OK) {     /* each scalar once */
                    goto done;
                }
            }
            continue;
        }
        if (failed) { status = FAILED; goto done; }
        PyObject *key = lookup(cache, KEYS, child->name, &failed);
        if (key != NULL) {
            if (ng == MAX_GROUPED) { status = UNDECIDED; goto done; }
            grouped[ng] = child;
            grouped_key[ng++] = key;
            continue;
        }
        if (failed) { status = FAILED; goto done; }
        if (strcmp((const char *)child->name, SKIPPED_NAME) != 0) { status = UNDECIDED; goto done; }
    }
    /* each group or object with all its elements, in the order of its first one */
    xmlNode *bucket[MAX_GROUPED];
    for (Py_ssize_t i = 0; i < ng; i++) {
        PyObject *key = grouped_key[i];
        if (key == NULL) continue;                  /* taken with an earlier one */
        Py_ssize_t n = 0;
        for (Py_ssize_t j = i; j < ng; j++) {
            if (grouped_key[j] == key) {
                bucket[n++] = grouped[j];
                grouped_key[j] = NULL;
            }
        }
        PyObject *rule = PyDict_GetItemWithError(GROUPS, key), *value = NULL;
        if (rule != NULL) {
            status = group_of(cache, bucket, n, rule, frozen, &value);
        } else if (PyErr_Occurred() || (rule = PyDict_GetItemWithError(OBJECTS, key)) == NULL) {
            status = FAILED;
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "a key with no rule");
        } else {
            status = object_of(cache, bucket, n, rule, frozen, &value);
        }
        if (status == ABSENT) { status = OK; continue; }
        if (status != OK || (status = parts_add(&fields, key, value)) != OK) goto done;       /* once per key */
    }
    PyObject *ordered = parts_dict(&fields, derived_part, DERIVED);
    if (ordered == NULL) return FAILED;
    if (frozen) {
        *result = PyDictProxy_New(ordered);
        Py_DECREF(ordered);
        return *result != NULL ? OK : FAILED;
    }
    *result = ordered;
    return OK;
done:
    parts_clear(&fields);
    return status;
}

/* --- the module ------------------------------------------------------------------------------- */

static PyObject *fields_many(PyObject *self, PyObject *args) {
    PyObject *records;
    int frozen;
    if (!PyArg_ParseTuple(args, "Op:fields_many", &records, &frozen)) return NULL;
    if (ELEMENT_TYPE == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(records, "records must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    NameCache *cache = PyMem_Calloc(1, sizeof(NameCache));
    if (out == NULL || cache == NULL) goto failed;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *record = PySequence_Fast_GET_ITEM(seq, i), *fields = NULL;
        if (!PyObject_TypeCheck(record, (PyTypeObject *)ELEMENT_TYPE)) {
            PyErr_SetString(PyExc_TypeError, "records must be lxml elements");
            goto failed;
        }
        xmlNode *node = ((LxmlElementView *)record)->c_node;
        int status = node != NULL && node->type == XML_ELEMENT_NODE ? record_fields(cache, node, frozen, &fields)
                                                                     : UNDECIDED;
        if (status == FAILED) goto failed;
        if (status != OK) {
            fields = Py_None;
            Py_INCREF(fields);
        }
        PyList_SET_ITEM(out, i, fields);
    }
    PyMem_Free(cache);
    Py_DECREF(seq);
    return out;
failed:
    PyMem_Free(cache);
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

/* Whether ``probe``, lxml's element for ``<P a="v">t</P>``, reads as that through the struct
 * this module assumes: an lxml whose element struct had changed is caught here, not in a walk. */
static int layout_holds(PyObject *probe, PyObject *element_type) {
    if (!PyObject_TypeCheck(probe, (PyTypeObject *)element_type)) return 0;
    xmlNode *node = ((LxmlElementView *)probe)->c_node;
    return node != NULL && node->type == XML_ELEMENT_NODE && node->name != NULL && strcmp((const char *)node->name, "P") == 0
        && node->properties != NULL && strcmp((const char *)node->properties->name, "a") == 0
        && node->properties->children != NULL && node->properties->children->content != NULL
        && strcmp((const char *)node->properties->children->content, "v") == 0
        && node->children != NULL && node->children->type == XML_TEXT_NODE
        && strcmp((const char *)node->children->content, "t") == 0;
}

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *scalars, *keys, *groups, *objects, *skipped, *derived, *plain_seq, *seq_fn, *element_type, *probe;
    if (!PyArg_ParseTuple(args, "O!O!O!O!UOO!OO!O:configure", &PyDict_Type, &scalars, &PyDict_Type, &keys,
                          &PyDict_Type, &groups, &PyDict_Type, &objects, &skipped, &derived,
                          &PyDict_Type, &plain_seq, &seq_fn, &PyType_Type, &element_type, &probe)) {
        return NULL;
    }
    if (!PyAnySet_Check(derived) || !PyCallable_Check(seq_fn)) {
        PyErr_SetString(PyExc_TypeError, "derived must be a set and sequence_value callable");
        return NULL;
    }
    if (!layout_holds(probe, element_type)) {
        PyErr_SetString(PyExc_RuntimeError, "lxml's element is not laid out as this module was built for");
        return NULL;
    }
    PyObject **slots[] = {&SCALARS, &KEYS, &GROUPS, &OBJECTS, &SKIPPED, &DERIVED, &PLAIN_SEQ, &SEQ_FN, &ELEMENT_TYPE};
    PyObject *values[] = {scalars, keys, groups, objects, skipped, derived, plain_seq, seq_fn, element_type};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        Py_INCREF(values[i]);
        Py_XSETREF(*slots[i], values[i]);
    }
    SKIPPED_NAME = PyUnicode_AsUTF8(SKIPPED);
    if (SKIPPED_NAME == NULL) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(scalars, keys, groups, objects, skipped, derived, plain_sequences, sequence_value, element_type, "
     "probe)"},
    {"fields_many", fields_many, METH_VARARGS,
     "fields_many(records, frozen) -> list of each record's fields, or None where Python must decide"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__record_walk(void) {
    TEXT_KEY = PyUnicode_InternFromString("TEXT");
    EMPTY = PyUnicode_FromString("");
    if (TEXT_KEY == NULL || EMPTY == NULL) return NULL;
    return PyModule_Create(&module);
}
