/* Finding, opening, checking and calling backend plugins (see loader.h).
 *
 * The plugin's vtable is copied into struct tr_plugin, zero-filled past the plugin's
 * struct_size: a plugin built against an older header has no memory behind the slots
 * it never knew, and reading them in place would read whatever the plugin put next.
 * The wrappers at the end of this file are the only code that calls a slot. */
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "trident/parse.h"
#include "trident/loader.h"
#include "trident/isolate.h"
#include "trident/log.h"

#ifndef TRIDENT_PLUGIN_BUILD_DIR
#define TRIDENT_PLUGIN_BUILD_DIR ""
#endif
#ifndef TRIDENT_PLUGIN_INSTALL_DIR
#define TRIDENT_PLUGIN_INSTALL_DIR ""
#endif
#ifndef TRIDENT_CORE_BUILD_DIR
#define TRIDENT_CORE_BUILD_DIR ""
#endif

#define PLUGIN_PREFIX "libtrident_backend_"
#define PLUGIN_SUFFIX ".so"
#define MAX_SEARCH_DIRS 64

struct tr_plugin {
    void *handle;
    struct tr_backend_i iface; /* the plugin's vtable, cut or padded to this host's size */
    char path[PATH_MAX];
};

struct tr_backend {
    struct tr_plugin *plugin;
    void *ctx;
    int device_type;
};

struct tr_program {
    struct tr_backend *be;
    const struct tr_graph *g;
    void *prog;
};

/* The minor version of ABI 1 that added each optional slot. */
#define SLOT_MINOR_SUPPORTS_OP 0u
#define SLOT_MINOR_GET_STATS 0u
#define SLOT_MINOR_SYNC 1u
/* The minor that added graph updates (training state). */
#define MINOR_UPDATES 1u

/* Text from a plugin made safe to print: cut at its buffer's last byte (a plugin that
 * filled the whole buffer left no NUL) and its control bytes (escape sequences, line
 * breaks that would forge a log line) shown as '?'. */
static void printable(char *s, size_t n) {
    s[n - 1] = '\0';
    tr_text_printable(s);
}

/* A plugin's error message, printable; empty: `none`. */
static const char *plugin_msg(struct tr_error *e, const char *none) {
    printable(e->msg, sizeof e->msg);
    return e->msg[0] ? e->msg : none;
}

/* A status a plugin returned, as the host passes it on: one trident/error.h does not know
 * becomes TR_ERR_PLUGIN (its number kept in *text, for the message). */
static int plugin_status(int rc, char *text, size_t n) {
    const int known = rc > TR_OK && rc <= TR_ERR_INTERRUPTED;
    if (known) snprintf(text, n, "%s", tr_status_name(rc));
    else snprintf(text, n, "status %d, which trident/error.h does not define", rc);
    return known ? rc : TR_ERR_PLUGIN;
}

static int minor_at_least(uint32_t abi_version, uint32_t minor) { return TR_ABI_GET_MINOR(abi_version) >= minor; }

/* An optional slot may be called only when the plugin's header had it (the minor that
 * added it, and a struct_size that reaches it) and the plugin filled it. A NULL alone
 * proves nothing for a plugin built before the slot existed. */
#define IFACE_HAS(it, slot, minor)                 \
    (minor_at_least((it)->abi_version, (minor)) && \
     (it)->struct_size >= offsetof(struct tr_backend_i, slot) + sizeof((it)->slot) && (it)->slot != NULL)

/* ---- where to look ---- */

struct search_dir {
    char path[PATH_MAX];
    const char *origin;
};

struct search_list {
    struct search_dir dirs[MAX_SEARCH_DIRS];
    int n;
};

static void search_add(struct search_list *l, const char *path, size_t len, const char *origin) {
    if (len == 0 || l->n == MAX_SEARCH_DIRS || len >= PATH_MAX) return;
    memcpy(l->dirs[l->n].path, path, len);
    l->dirs[l->n].path[len] = '\0';
    l->dirs[l->n].origin = origin;
    l->n++;
}

/* The directory libtrident was loaded from (the program's, if linked in statically). */
static int self_dir(char *buf) {
    static const char anchor = 0;
    Dl_info info;
    char *slash;
    if (!dladdr(&anchor, &info) || !info.dli_fname || !realpath(info.dli_fname, buf)) return 0;
    if (!(slash = strrchr(buf, '/'))) return 0;
    *slash = '\0';
    return 1;
}

static int same_dir(const char *real, const char *dir) {
    char r[PATH_MAX];
    return dir[0] && realpath(dir, r) && strcmp(real, r) == 0;
}

/* The build tree is searched only by the libtrident built there, and the install dir is
 * found from where libtrident is: PREFIX/lib/libtrident.so -> PREFIX/lib/trident
 * (PREFIX/bin/x with libtrident linked in -> PREFIX/lib/trident). So a tree installed
 * with `cmake --install --prefix`, or moved after, uses its own backends with no
 * environment variable and never those of the build it came from. */
static void search_add_builtin(struct search_list *l) {
    char self[PATH_MAX], dir[PATH_MAX + 32];
    int have_self = self_dir(self);
    if (!have_self || same_dir(self, TRIDENT_CORE_BUILD_DIR)) {
        search_add(l, TRIDENT_PLUGIN_BUILD_DIR, strlen(TRIDENT_PLUGIN_BUILD_DIR), "build tree");
        search_add(l, TRIDENT_PLUGIN_INSTALL_DIR, strlen(TRIDENT_PLUGIN_INSTALL_DIR), "install dir");
        return;
    }
    size_t n = strlen(self);
    int in_bin = n >= 4 && strcmp(self + n - 4, "/bin") == 0;
    int len = snprintf(dir, sizeof dir, "%s%s/trident", self, in_bin ? "/../lib" : "");
    if (len > 0 && (size_t)len < sizeof dir) search_add(l, dir, (size_t)len, "install dir");
}

static void search_build(const struct tr_plugin_search *s, struct search_list *l) {
    l->n = 0;
    const char *ini = s ? s->ini_dir : NULL;
    const char *env = s && s->env_path ? s->env_path : getenv("TRIDENT_PLUGIN_PATH");
    if (ini) search_add(l, ini, strlen(ini), "[plugins] path");
    while (env && *env) {
        const char *colon = strchr(env, ':');
        size_t len = colon ? (size_t)(colon - env) : strlen(env);
        search_add(l, env, len, "TRIDENT_PLUGIN_PATH");
        env = colon ? colon + 1 : NULL;
    }
    search_add_builtin(l);
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* ---- opening and checking one file ---- */

/* Why a file that exists did not load, where the loader says less: glibc answers a shared
 * object of another machine with "No such file or directory", as though it were not there. */
static const char *elf_machine_name(unsigned m) {
    switch (m) {
    case EM_386: return "i386";
    case EM_X86_64: return "x86-64";
    case EM_ARM: return "arm";
    case EM_AARCH64: return "aarch64";
    case EM_PPC64: return "ppc64";
    case EM_S390: return "s390";
    case EM_RISCV: return "riscv";
    default: return NULL;
    }
}

static int other_machine(const char *path, char *buf, size_t n) {
#if defined(__x86_64__)
    const unsigned host = EM_X86_64;
#elif defined(__aarch64__)
    const unsigned host = EM_AARCH64;
#else
    return 0;
#endif
    unsigned char h[EI_NIDENT + 4];
    FILE *f = fopen(path, "rb");
    const size_t got = f ? fread(h, 1, sizeof h, f) : 0;
    if (f) fclose(f);
    if (got < sizeof h || memcmp(h, ELFMAG, SELFMAG) != 0) return 0;
    /* e_machine, after e_type, in the file's own byte order */
    const unsigned m = h[EI_DATA] == ELFDATA2MSB ? (unsigned)h[EI_NIDENT + 2] << 8 | h[EI_NIDENT + 3]
                                                  : (unsigned)h[EI_NIDENT + 3] << 8 | h[EI_NIDENT + 2];
    if (m == host) return 0;
    const char *name = elf_machine_name(m);
    if (name) snprintf(buf, n, "it is built for %s, and this trident runs on %s: build it here", name,
                       elf_machine_name(host));
    else snprintf(buf, n, "it is built for another machine (ELF e_machine %u), and this trident runs on %s: build "
                  "it here", m, elf_machine_name(host));
    return 1;
}

static const char *slot_missing(const struct tr_backend_i *it) {
    if (!it->init) return "init";
    if (!it->free) return "free";
    if (!it->compile) return "compile";
    if (!it->execute) return "execute";
    if (!it->program_free) return "program_free";
    return NULL;
}

/* dlopen path and check everything up to (not including) init. On refusal the library
 * is closed again and err names the file and the reason. */
static int plugin_load(const char *path, void **handle_out, struct tr_backend_i *iface_out, struct tr_error *err) {
    /* A path without a slash would send dlopen through the system library path. */
    char local[PATH_MAX];
    if (!strchr(path, '/')) {
        if (snprintf(local, sizeof local, "./%s", path) >= (int)sizeof local)
            return tr_error_set(err, TR_ERR_INVALID, "plugin path too long: %s", path);
        path = local;
    }
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        char arch[160];
        if (other_machine(path, arch, sizeof arch))
            return tr_error_set(err, TR_ERR_PLUGIN, "plugin [%s]: not a loadable shared object: %s", path, arch);
        return tr_error_set(err, TR_ERR_PLUGIN, "plugin [%s]: not a loadable shared object: %s", path,
                            why ? why : "dlopen failed");
    }
    /* POSIX allows no cast between object and function pointers; copy the bits. */
    void *sym = dlsym(h, TR_BACKEND_ENTRY_SYMBOL);
    if (!sym) {
        dlclose(h);
        return tr_error_set(err, TR_ERR_PLUGIN, "no entry point [%s] in shared library [%s]", TR_BACKEND_ENTRY_SYMBOL,
                            path);
    }
    tr_backend_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry);

    struct tr_error perr = {0};
    const struct tr_backend_i *it = NULL;
    int rc = entry(TR_ABI_VERSION, tr_host_api_get(), &it, &perr);
    if (rc != TR_OK) {
        tr_error_set(err, TR_ERR_PLUGIN, "plugin [%s]: %s failed (%s): %s", path, TR_BACKEND_ENTRY_SYMBOL,
                     tr_status_name(rc), plugin_msg(&perr, "(no message)"));
        dlclose(h);
        return TR_ERR_PLUGIN;
    }
    if (!it) {
        dlclose(h);
        return tr_error_set(err, TR_ERR_PLUGIN, "plugin [%s]: %s returned no vtable (NULL)", path,
                            TR_BACKEND_ENTRY_SYMBOL);
    }
    /* Only struct_size and abi_version can be trusted before the version is checked. */
    uint32_t ver = it->abi_version, size = it->struct_size;
    if (TR_ABI_GET_MAJOR(ver) != TR_ABI_MAJOR) {
        dlclose(h);
        return tr_error_set(err, TR_ERR_PLUGIN, "plugin [%s]: incompatible ABI version (backend: %u.%u, host: %u.%u)",
                            path, TR_ABI_GET_MAJOR(ver), TR_ABI_GET_MINOR(ver), TR_ABI_MAJOR, TR_ABI_MINOR);
    }
    if (size < TR_BACKEND_I_MIN_SIZE_1_0) {
        dlclose(h);
        return tr_error_set(err, TR_ERR_PLUGIN, "plugin [%s]: vtable too short: %u bytes, ABI 1.0 needs at least %zu",
                            path, size, (size_t)TR_BACKEND_I_MIN_SIZE_1_0);
    }
    memset(iface_out, 0, sizeof *iface_out);
    memcpy(iface_out, it, size < sizeof *iface_out ? size : sizeof *iface_out);
    const char *missing = slot_missing(iface_out);
    if (missing) {
        dlclose(h);
        return tr_error_set(err, TR_ERR_PLUGIN, "plugin [%s]: required slot '%s' is NULL (ABI %u.%u)", path, missing,
                            TR_ABI_GET_MAJOR(ver), TR_ABI_GET_MINOR(ver));
    }
    if (!iface_out->name || !iface_out->name[0]) {
        dlclose(h);
        return tr_error_set(err, TR_ERR_PLUGIN, "plugin [%s]: the vtable has no name", path);
    }
    /* the name goes into tables, labels and messages: a word, as the backends list's */
    size_t len = strnlen(iface_out->name, 65);
    for (size_t i = 0; i < len; i++)
        if (!(isalnum((unsigned char)iface_out->name[i]) || iface_out->name[i] == '_' || iface_out->name[i] == '-'))
            len = 0;
    if (len == 0 || len > 64) {
        dlclose(h);
        return tr_error_set(err, TR_ERR_PLUGIN, "plugin [%s]: the vtable's name is not a word of at most 64 letters, "
                            "digits, '_' and '-'", path);
    }
    if (!iface_out->description) iface_out->description = "";
    *handle_out = h;
    return TR_OK;
}

/* ---- public: plugins ---- */

int tr_plugin_locate(const char *name_or_path, const struct tr_plugin_search *s, char *path, size_t cap,
                     struct tr_error *err) {
    if (!name_or_path || !name_or_path[0])
        return tr_error_set(err, TR_ERR_INVALID, "tr_plugin_open: no backend name or path given");
    if (strchr(name_or_path, '/') || ends_with(name_or_path, PLUGIN_SUFFIX)) {
        if (strlen(name_or_path) >= cap)
            return tr_error_set(err, TR_ERR_INVALID, "plugin path too long: %s", name_or_path);
        if (!is_file(name_or_path)) {
            struct stat st, lst;
            if (lstat(name_or_path, &lst) == 0 && S_ISLNK(lst.st_mode) && stat(name_or_path, &st) != 0)
                return tr_error_set(err, TR_ERR_NOT_FOUND, "plugin file %s is a link to nothing (%s)", name_or_path,
                                    strerror(errno));
            if (stat(name_or_path, &st) == 0)
                return tr_error_set(err, TR_ERR_INVALID, "plugin file %s is %s, not a shared object file",
                                    name_or_path, S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
            return tr_error_set(err, TR_ERR_NOT_FOUND, "plugin file not found: %s", name_or_path);
        }
        snprintf(path, cap, "%s", name_or_path);
        return TR_OK;
    }
    struct search_list *l = malloc(sizeof *l);
    if (!l) return tr_error_set(err, TR_ERR_NOMEM, "tr_plugin_open: out of memory");
    search_build(s, l);
    int found = 0;
    for (int i = 0; i < l->n && !found; i++) {
        int n = snprintf(path, cap, "%s/" PLUGIN_PREFIX "%s" PLUGIN_SUFFIX, l->dirs[i].path, name_or_path);
        found = n < (int)cap && is_file(path);
    }
    if (!found) {
        char where[TR_ERROR_MSG_MAX];
        size_t off = 0;
        where[0] = '\0';
        for (int i = 0; i < l->n && off < sizeof where; i++)
            off += (size_t)snprintf(where + off, sizeof where - off, "%s%s (%s)", i ? ", " : "", l->dirs[i].path,
                                    l->dirs[i].origin);
        int none = l->n == 0;
        free(l);
        path[0] = '\0';
        return tr_error_set(err, TR_ERR_NOT_FOUND,
                            "backend '%s' not found: no " PLUGIN_PREFIX "%s" PLUGIN_SUFFIX " in %s", name_or_path,
                            name_or_path, none ? "(no directory to search)" : where);
    }
    free(l);
    return TR_OK;
}

int tr_plugin_open(const char *name_or_path, const struct tr_plugin_search *s, struct tr_plugin **out,
                   struct tr_error *err) {
    if (!out) return tr_error_set(err, TR_ERR_INVALID, "tr_plugin_open: out is NULL");
    *out = NULL;
    char path[PATH_MAX];
    int rc0 = tr_plugin_locate(name_or_path, s, path, sizeof path, err);
    if (rc0) return rc0;

    struct tr_plugin *p = calloc(1, sizeof *p);
    if (!p) return tr_error_set(err, TR_ERR_NOMEM, "tr_plugin_open: out of memory");
    snprintf(p->path, sizeof p->path, "%s", path);
    int rc = plugin_load(p->path, &p->handle, &p->iface, err);
    if (rc != TR_OK) {
        free(p);
        return rc;
    }
    tr_log(TR_LOG_INFO, "backend '%s' (ABI %u.%u) loaded from %s", p->iface.name,
           TR_ABI_GET_MAJOR(p->iface.abi_version), TR_ABI_GET_MINOR(p->iface.abi_version), p->path);
    *out = p;
    return TR_OK;
}

void tr_plugin_close(struct tr_plugin *p) {
    if (!p) return;
    if (p->handle) dlclose(p->handle);
    free(p);
}

const struct tr_backend_i *tr_plugin_iface(const struct tr_plugin *p) { return p ? &p->iface : NULL; }
const char *tr_plugin_path(const struct tr_plugin *p) { return p ? p->path : NULL; }

static int is_plugin_file(const struct dirent *d) {
    const char *n = d->d_name;
    return strncmp(n, PLUGIN_PREFIX, strlen(PLUGIN_PREFIX)) == 0 &&
           strlen(n) > strlen(PLUGIN_PREFIX) + strlen(PLUGIN_SUFFIX) && ends_with(n, PLUGIN_SUFFIX);
}

/* File names of accepted plugins seen so far, for `shadowed`. */
struct seen {
    char **names;
    int n, cap;
};

static int seen_has(const struct seen *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0) return 1;
    return 0;
}

static int seen_add(struct seen *s, const char *name) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        char **names = realloc(s->names, sizeof *names * (size_t)cap);
        if (!names) return TR_ERR_NOMEM;
        s->names = names;
        s->cap = cap;
    }
    if (!(s->names[s->n] = strdup(name))) return TR_ERR_NOMEM;
    s->n++;
    return TR_OK;
}

/* What a probe of one candidate found, in memory shared with the child that loaded it. */
struct scan_probe {
    const char *path;
    int ok;
    char name[64], description[TR_ERROR_MSG_MAX / 2];
    struct tr_error why;
};

static int scan_probe_run(void *arg, int cmd) {
    (void)cmd;
    struct scan_probe *p = arg;
    void *h = NULL;
    struct tr_backend_i it = {0};
    p->ok = plugin_load(p->path, &h, &it, &p->why) == TR_OK;
    if (p->ok) {
        snprintf(p->name, sizeof p->name, "%s", it.name);
        snprintf(p->description, sizeof p->description, "%s", it.description ? it.description : "");
    }
    if (h) dlclose(h);
    return TR_OK;
}

/* A candidate loaded in a child first (when this process can fork): a plugin whose
 * constructor or entry crashes, exits or hangs is refused with why, and the scan goes on.
 * Only one that loads cleanly there is loaded here. */
static int scan_probe(const char *path, struct scan_probe *sp, struct tr_error *why) {
    if (!tr_fork_safe(NULL)) return 1;
    sp->path = path;
    struct tr_error e = {0};
    int status;
    if (tr_child_once(scan_probe_run, sp, 'L', 60, "its load", &status, &e) != TR_OK) {
        tr_error_set(why, TR_ERR_PLUGIN, "%s", e.msg);
        return 0;
    }
    if (!sp->ok) *why = sp->why;
    return sp->ok;
}

int tr_plugin_scan(const struct tr_plugin_search *s, tr_plugin_visit_fn visit, void *user, struct tr_error *err) {
    if (!visit) return tr_error_set(err, TR_ERR_INVALID, "tr_plugin_scan: visit is NULL");
    struct search_list *l = malloc(sizeof *l);
    char(*real)[PATH_MAX] = malloc(sizeof *real * MAX_SEARCH_DIRS);
    struct tr_error *why = malloc(sizeof *why);
    struct scan_probe *probe = tr_shared_alloc(sizeof *probe, err);
    struct seen seen = {0};
    int rc = TR_OK;
    if (!probe) rc = err->status;
    if (!l || !real || !why) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "tr_plugin_scan: out of memory");
        goto done;
    }
    search_build(s, l);
    for (int i = 0; i < l->n && rc == TR_OK; i++) {
        /* The same directory named twice (TRIDENT_PLUGIN_PATH pointing at the build
         * tree) is listed once, under its first origin. */
        if (!realpath(l->dirs[i].path, real[i])) {
            real[i][0] = '\0';
            continue;
        }
        int dup = 0;
        for (int j = 0; j < i && !dup; j++) dup = strcmp(real[i], real[j]) == 0;
        if (dup) continue;
        struct dirent **ents = NULL;
        int n = scandir(l->dirs[i].path, &ents, is_plugin_file, alphasort);
        if (n < 0) continue;
        for (int e = 0; e < n; e++) {
            char path[PATH_MAX];
            if (rc == TR_OK &&
                snprintf(path, sizeof path, "%s/%s", l->dirs[i].path, ents[e]->d_name) < (int)sizeof path &&
                is_file(path)) {
                void *h = NULL;
                struct tr_backend_i it = {0};
                tr_error_clear(why);
                int ok = probe && scan_probe(path, probe, why) && plugin_load(path, &h, &it, why) == TR_OK;
                struct tr_plugin_candidate c = {
                    .path = path,
                    .origin = l->dirs[i].origin,
                    .accepted = ok,
                    .shadowed = ok && seen_has(&seen, ents[e]->d_name),
                    .name = ok ? it.name : "",
                    .description = ok ? it.description : "",
                    .reason = ok ? "" : why->msg,
                };
                if (ok && !c.shadowed && seen_add(&seen, ents[e]->d_name) != TR_OK)
                    rc = tr_error_set(err, TR_ERR_NOMEM, "tr_plugin_scan: out of memory");
                visit(&c, user); /* before dlclose: name and description live in the plugin */
                if (h) dlclose(h);
            }
            free(ents[e]);
        }
        free(ents);
    }
done:
    for (int i = 0; i < seen.n; i++) free(seen.names[i]);
    free(seen.names);
    free(why);
    free(real);
    free(l);
    tr_shared_free(probe, sizeof *probe);
    return rc;
}

/* ---- public: instances, the only callers of the vtable ---- */

static const char *be_name(const struct tr_backend *be) { return be->plugin->iface.name; }

const char *tr_caps_str(uint64_t caps, char *buf, size_t n) {
    static const struct { uint64_t cap; const char *name; } names[] = {
        {TR_CAP_CPU, "cpu"},   {TR_CAP_CUDA, "cuda"}, {TR_CAP_F32, "f32"},
        {TR_CAP_BF16, "bf16"}, {TR_CAP_F16, "f16"},   {TR_CAP_TRAINING, "training"},
    };
    size_t k = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((caps & names[i].cap) && k < n)
            k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? " " : "", names[i].name);
    if (!buf[0]) snprintf(buf, n, "(none)");
    return buf;
}

/* The cap a dtype needs; 0 for the integer dtypes every backend moves (ids, positions). */
static uint64_t dtype_cap(int dtype) {
    switch (dtype) {
    case TR_DTYPE_F32: return TR_CAP_F32;
    case TR_DTYPE_BF16: return TR_CAP_BF16;
    case TR_DTYPE_F16: return TR_CAP_F16;
    default: return 0;
    }
}

/* A backend is held to what it declares: a device, a graph node's dtype or a training
 * step the caps do not list is refused here, by name, rather than run on a path its author
 * never meant (and may never have tested). */
static int check_caps(const struct tr_backend *be, const struct tr_graph *g, struct tr_error *err) {
    uint64_t caps = be->plugin->iface.caps;
    char has[96];
    /* The plugin's own init may have refused the device already, in its words; one that
     * did not is still held to its caps. */
    uint64_t dev = be->device_type == TR_DEVICE_CUDA ? TR_CAP_CUDA : TR_CAP_CPU;
    if (!(caps & dev))
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "backend '%s' does not declare %s, so it does not run on %s; "
                            "it declares %s", be_name(be), dev == TR_CAP_CUDA ? "TR_CAP_CUDA" : "TR_CAP_CPU",
                            dev == TR_CAP_CUDA ? "cuda" : "cpu", tr_caps_str(caps, has, sizeof has));
    for (int id = 0; id < tr_graph_n_nodes(g); id++) {
        int dt = tr_node_dtype(g, id), op = tr_node_op(g, id);
        uint64_t need = dtype_cap(dt);
        const char *cap = need == TR_CAP_F32 ? "TR_CAP_F32" : need == TR_CAP_BF16 ? "TR_CAP_BF16" : "TR_CAP_F16";
        if (need && !(caps & need))
            return tr_error_set(err, TR_ERR_UNSUPPORTED,
                                "backend '%s' does not declare %s: node %d '%s' (%s) is %s; it declares %s",
                                be_name(be), cap, id, tr_node_name(g, id), tr_op_name(op),
                                tr_dtype_name((enum tr_dtype)dt), tr_caps_str(caps, has, sizeof has));
        if (tr_op_is_training(op) && !(caps & TR_CAP_TRAINING))
            return tr_error_set(err, TR_ERR_UNSUPPORTED,
                                "backend '%s' does not declare TR_CAP_TRAINING: node %d '%s' is %s, a training op; "
                                "it declares %s",
                                be_name(be), id, tr_node_name(g, id), tr_op_name(op), tr_caps_str(caps, has, sizeof has));
    }
    if (tr_graph_n_updates(g) > 0 && !(caps & TR_CAP_TRAINING))
        return tr_error_set(err, TR_ERR_UNSUPPORTED,
                            "backend '%s' does not declare TR_CAP_TRAINING: the graph updates %d params; it declares %s",
                            be_name(be), tr_graph_n_updates(g), tr_caps_str(caps, has, sizeof has));
    return TR_OK;
}

int tr_backend_init(struct tr_plugin *p, const struct tr_backend_params *params, struct tr_backend **out,
                    struct tr_error *err) {
    if (!out) return tr_error_set(err, TR_ERR_INVALID, "tr_backend_init: out is NULL");
    *out = NULL;
    if (!p) return tr_error_set(err, TR_ERR_INVALID, "tr_backend_init: no plugin");
    struct tr_backend_params prm = {0};
    if (params) prm = *params;
    prm.struct_size = sizeof prm;
    prm.abi_version = TR_ABI_VERSION;
    if (prm.n_options < 0 || (prm.n_options > 0 && !prm.options))
        return tr_error_set(err, TR_ERR_INVALID, "backend '%s': %d options but no option array", p->iface.name,
                            prm.n_options);

    struct tr_backend *be = calloc(1, sizeof *be);
    if (!be) return tr_error_set(err, TR_ERR_NOMEM, "tr_backend_init: out of memory");
    be->plugin = p;
    be->device_type = prm.device_type;
    struct tr_error perr = {0};
    int rc = p->iface.init(tr_host_api_get(), &prm, &be->ctx, &perr);
    if (rc != TR_OK) {
        free(be);
        char st[96];
        plugin_status(rc, st, sizeof st);
        return tr_error_set(err, TR_ERR_PLUGIN, "backend '%s' (%s): init failed: %s", p->iface.name, p->path,
                            plugin_msg(&perr, st));
    }
    *out = be;
    return TR_OK;
}

void tr_backend_free(struct tr_backend *be) {
    if (!be) return;
    be->plugin->iface.free(be->ctx);
    free(be);
}

const char *tr_backend_name(const struct tr_backend *be) { return be ? be_name(be) : NULL; }

int tr_backend_supports_op(struct tr_backend *be, int op, int dtype) {
    if (!be || op < 0 || op >= TR_OP_COUNT || dtype < 0 || dtype >= TR_DTYPE_COUNT) return 0;
    const struct tr_backend_i *it = &be->plugin->iface;
    if (IFACE_HAS(it, supports_op, SLOT_MINOR_SUPPORTS_OP)) return it->supports_op(be->ctx, op, dtype) != 0;
    return 1; /* runs it, through the shared kernels' default */
}

int tr_backend_check_graph(const struct tr_backend *be, const struct tr_graph *g, struct tr_error *err) {
    if (!be || !g) return tr_error_set(err, TR_ERR_INVALID, "tr_backend_check_graph: no backend or no graph");
    uint32_t ver = be->plugin->iface.abi_version;
    if (tr_graph_n_updates(g) > 0 && !minor_at_least(ver, MINOR_UPDATES))
        return tr_error_set(err, TR_ERR_UNSUPPORTED,
                            "backend '%s' speaks ABI %u.%u: the graph updates %d params (training), which needs "
                            "ABI %u.%u; rebuild the plugin against this trident",
                            be_name(be), TR_ABI_GET_MAJOR(ver), TR_ABI_GET_MINOR(ver), tr_graph_n_updates(g),
                            TR_ABI_MAJOR, MINOR_UPDATES);
    return check_caps(be, g, err);
}

int tr_backend_compile(struct tr_backend *be, const struct tr_graph *g, struct tr_program **out, struct tr_error *err) {
    if (!out) return tr_error_set(err, TR_ERR_INVALID, "tr_backend_compile: out is NULL");
    *out = NULL;
    if (!be || !g) return tr_error_set(err, TR_ERR_INVALID, "tr_backend_compile: no backend or no graph");
    struct tr_error gerr = {0};
    if (tr_graph_status(g, &gerr) != TR_OK)
        return tr_error_set(err, gerr.status, "backend '%s': cannot compile a graph that failed to build: %s",
                            be_name(be), gerr.msg);
    int crc = tr_backend_check_graph(be, g, err);
    if (crc != TR_OK) return crc;
    struct tr_program *prog = calloc(1, sizeof *prog);
    if (!prog) return tr_error_set(err, TR_ERR_NOMEM, "tr_backend_compile: out of memory");
    prog->be = be;
    prog->g = g;
    struct tr_error perr = {0};
    int rc = be->plugin->iface.compile(be->ctx, (tr_graph_t)g, &prog->prog, &perr);
    if (rc != TR_OK) {
        free(prog);
        char st[96];
        rc = plugin_status(rc, st, sizeof st);
        return tr_error_set(err, rc, "backend '%s' (%s): compile failed: %s", be_name(be), be->plugin->path,
                            plugin_msg(&perr, st));
    }
    *out = prog;
    return TR_OK;
}

/* t must be what the graph says node id is. what: "input", "output". */
static int check_tensor(const struct tr_backend *be, const struct tr_graph *g, const char *what, int i,
                        const char *name, int id, const struct tr_tensor *t, struct tr_error *err) {
    int dt = tr_node_dtype(g, id), nd = tr_node_ndim(g, id);
    const int64_t *shape = tr_node_shape(g, id);
    char got[160], want[160];
    if (!t->data)
        return tr_error_set(err, TR_ERR_INVALID, "backend '%s': %s %d '%s' has no data", be_name(be), what, i, name);
    int same = t->dtype == dt && t->ndim == nd;
    for (int d = 0; same && d < nd; d++) same = t->shape[d] == shape[d];
    if (!same) {
        tr_shape_str(t->ndim >= 0 && t->ndim <= TR_MAX_DIMS ? t->ndim : 0, t->shape, got, sizeof got);
        tr_shape_str(nd, shape, want, sizeof want);
        return tr_error_set(err, TR_ERR_SHAPE, "backend '%s': %s %d '%s' is %s%s, the graph expects %s%s", be_name(be),
                            what, i, name, tr_dtype_name((enum tr_dtype)t->dtype), got,
                            tr_dtype_name((enum tr_dtype)dt), want);
    }
    if (!tr_tensor_is_contiguous(t))
        return tr_error_set(err, TR_ERR_SHAPE, "backend '%s': %s %d '%s' is not contiguous", be_name(be), what, i,
                            name);
    if (t->device != TR_DEVICE_CPU)
        return tr_error_set(err, TR_ERR_INVALID, "backend '%s': %s %d '%s' is not in host memory (device %d)",
                            be_name(be), what, i, name, t->device);
    return TR_OK;
}

int tr_backend_execute(struct tr_backend *be, struct tr_program *prog, int n_inputs, const struct tr_tensor *inputs,
                       int n_outputs, struct tr_tensor *outputs, struct tr_error *err) {
    if (!be || !prog) return tr_error_set(err, TR_ERR_INVALID, "tr_backend_execute: no backend or no program");
    if (prog->be != be)
        return tr_error_set(err, TR_ERR_INVALID,
                            "tr_backend_execute: the program was compiled by backend '%s', not '%s'", be_name(prog->be),
                            be_name(be));
    const struct tr_graph *g = prog->g;
    int gin = tr_graph_n_inputs(g), gout = tr_graph_n_outputs(g);
    if (n_inputs != gin || n_outputs != gout)
        return tr_error_set(err, TR_ERR_INVALID,
                            "backend '%s': execute got %d inputs and %d outputs, the graph has %d and %d", be_name(be),
                            n_inputs, n_outputs, gin, gout);
    if ((gin && !inputs) || (gout && !outputs))
        return tr_error_set(err, TR_ERR_INVALID, "backend '%s': execute: inputs or outputs array is NULL", be_name(be));
    for (int i = 0; i < gin; i++) {
        int id = tr_graph_input(g, i);
        int rc = check_tensor(be, g, "input", i, tr_node_name(g, id), id, &inputs[i], err);
        if (rc != TR_OK) return rc;
    }
    for (int i = 0; i < gout; i++) {
        const char *name = tr_graph_output_name(g, i);
        int id = tr_graph_output(g, i);
        int rc = check_tensor(be, g, "output", i, name && name[0] ? name : tr_node_name(g, id), id, &outputs[i], err);
        if (rc != TR_OK) return rc;
    }
    /* The outputs' descriptors as given: a plugin writes values into those buffers, and one
     * that rewrote a descriptor (another pointer, shape or dtype) would have the host read
     * the wrong memory later; it is put back and the step refused, naming the output. */
    struct tr_tensor given[16], *keep = gout <= 16 ? given : malloc(sizeof *keep * (size_t)gout);
    if (!keep) return tr_error_set(err, TR_ERR_NOMEM, "backend '%s': execute: no memory", be_name(be));
    memcpy(keep, outputs, sizeof *keep * (size_t)gout);
    struct tr_error perr = {0};
    int rc = be->plugin->iface.execute(be->ctx, prog->prog, n_inputs, inputs, n_outputs, outputs, &perr);
    int changed = -1, said = 0;
    for (int i = 0; i < gout; i++)
        if (memcmp(&keep[i], &outputs[i], sizeof *keep) != 0) {
            if (changed < 0) changed = i;
            const char *what = keep[i].data != outputs[i].data ? "data pointer" : keep[i].dtype != outputs[i].dtype ? "dtype"
                               : "shape or strides";
            if (changed == i && rc == TR_OK) {
                const char *name = tr_graph_output_name(g, i);
                rc = tr_error_set(err, TR_ERR_PLUGIN, "backend '%s': execute changed output %d ('%s')'s %s; a backend "
                                  "writes the values into the buffer it is given", be_name(be), i,
                                  name && name[0] ? name : tr_node_name(g, tr_graph_output(g, i)), what);
                said = 1;
            }
            outputs[i] = keep[i];
        }
    if (keep != given) free(keep);
    if (rc != TR_OK && !said) {
        char st[96];
        rc = plugin_status(rc, st, sizeof st);
        return tr_error_set(err, rc, "backend '%s' (%s): execute failed: %s", be_name(be), be->plugin->path,
                            plugin_msg(&perr, st));
    }
    return rc;
}

int tr_backend_get_stats(struct tr_backend *be, struct tr_program *prog, struct tr_backend_stats *st,
                         struct tr_error *err) {
    if (!be || !prog || !st) return tr_error_set(err, TR_ERR_INVALID, "tr_backend_get_stats: NULL argument");
    if (prog->be != be)
        return tr_error_set(err, TR_ERR_INVALID,
                            "tr_backend_get_stats: the program was compiled by backend '%s', not '%s'",
                            be_name(prog->be), be_name(be));
    memset(st, 0, sizeof *st);
    st->struct_size = sizeof *st;
    st->abi_version = TR_ABI_VERSION;
    const struct tr_backend_i *it = &be->plugin->iface;
    if (!IFACE_HAS(it, get_stats, SLOT_MINOR_GET_STATS)) return TR_OK; /* zeros: the backend reports nothing */
    struct tr_error perr = {0};
    int rc = it->get_stats(be->ctx, prog->prog, st, &perr);
    st->struct_size = sizeof *st;
    st->abi_version = TR_ABI_VERSION;
    printable(st->mode, sizeof st->mode); /* both printed in the report */
    printable(st->notes, sizeof st->notes);
    if (rc != TR_OK)
        return tr_error_set(err, rc, "backend '%s': get_stats failed: %s", be_name(be),
                            plugin_msg(&perr, tr_status_name(rc)));
    return TR_OK;
}

int tr_backend_sync(struct tr_backend *be, struct tr_program *prog, struct tr_error *err) {
    if (!be || !prog) return tr_error_set(err, TR_ERR_INVALID, "tr_backend_sync: no backend or no program");
    if (prog->be != be)
        return tr_error_set(err, TR_ERR_INVALID, "tr_backend_sync: the program was compiled by backend '%s', not '%s'",
                            be_name(prog->be), be_name(be));
    const struct tr_backend_i *it = &be->plugin->iface;
    if (!IFACE_HAS(it, sync, SLOT_MINOR_SYNC)) return TR_OK; /* it computes in host memory */
    struct tr_error perr = {0};
    int rc = it->sync(be->ctx, prog->prog, &perr);
    if (rc != TR_OK)
        return tr_error_set(err, rc, "backend '%s': sync failed: %s", be_name(be),
                            plugin_msg(&perr, tr_status_name(rc)));
    return TR_OK;
}

void tr_program_free(struct tr_program *prog) {
    if (!prog) return;
    prog->be->plugin->iface.program_free(prog->be->ctx, prog->prog);
    free(prog);
}
