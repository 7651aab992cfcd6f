/* The jax backend's attention backward groups: the 2 or 3 ATTENTION_GRAD nodes of one
 * attention run as one call of the shared fused kernel. BERT tiny's gradients and fit step
 * against torch, and a group of dq and dv only against a float64 reference. */
#include "jax_test.h"

/* ---- attention backward: the 2 or 3 ATTENTION_GRAD nodes of one attention, one call ---- */

/* The group's step: one ATTN_BWD step at its lead, every gradient's buffer written there
 * (live from that step), no step of their own for the others. */
static void check_groups(const struct tr_jax_program *p, int want_groups, int want_grads) {
    assert_int_equal(p->fusion.n_attn, want_groups);
    int steps = 0;
    for (int si = 0; si < p->n_steps; si++) {
        const struct jax_step *s = &p->steps[si];
        if (s->kind != JAX_STEP_ATTN_BWD) continue;
        steps++;
        const struct jax_attn_bwd *a = &p->fusion.attn[s->attn];
        assert_int_equal(s->node, a->lead);
        assert_int_equal(a->n_grads, want_grads);
        assert_non_null(s->call);
        int readers = 0;
        for (int w = 0; w < 3; w++) {
            if (a->grad[w] < 0) continue;
            assert_true(a->grad[w] >= a->lead);
            assert_int_equal(p->pir.nodes[a->grad[w]].attrs.ints[2], w);
            int b = p->buf_of[a->grad[w]];
            if (b >= 0) assert_int_equal(p->bufs[b].first, si + 1);
            for (int sj = 0; sj < p->n_steps; sj++) {
                if (sj != si) assert_int_not_equal(p->steps[sj].node, a->grad[w]);
                int ids[TR_PIR_MAX_IN * 8 + 64], nr = 0;
                if (p->steps[sj].kind == JAX_STEP_GEN &&
                    p->fusion.clusters[p->steps[sj].cluster].n_args > (int)(sizeof ids / sizeof ids[0]))
                    fail_msg("kernel %d has too many operands for this check", p->steps[sj].cluster);
                tr_jax_read_nodes(p, &p->steps[sj], ids, &nr);
                for (int r = 0; r < nr; r++) {
                    if (p->root_of[ids[r]] != a->grad[w]) continue;
                    assert_true(sj > si); /* read after the group's call wrote it */
                    readers++;
                    if (b >= 0) assert_true(p->bufs[b].last >= sj + 1); /* and alive until then */
                }
            }
        }
        assert_true(readers > 0);
    }
    assert_int_equal(steps, want_groups);
}

/* ‖out − ref‖ / scale; +inf on a NaN or Inf in out. */
static double scaled_err(const struct tr_tensor *out, const struct tr_tensor *ref, double scale) {
    double *o = tr_test_to_f64(out), *r = tr_test_to_f64(ref), s = 0;
    int64_t n = tr_tensor_numel(out);
    for (int64_t i = 0; i < n && isfinite(s); i++) s += isfinite(o[i]) ? (o[i] - r[i]) * (o[i] - r[i]) : INFINITY;
    free(o);
    free(r);
    return sqrt(s) / scale;
}

static double norm_of(const struct tr_tensor *t) {
    double *x = tr_test_to_f64(t), s = 0;
    for (int64_t i = 0; i < tr_tensor_numel(t); i++) s += x[i] * x[i];
    free(x);
    return sqrt(s);
}

/* Execute p once with poisoned outputs; its stats. */
static void exec_ok(struct tr_jax_context *ctx, struct tr_jax_program *p, const struct tr_graph *g,
                    const struct tr_tensor *in, struct tr_tensor *out, struct tr_backend_stats *st) {
    struct tr_error e = {0};
    for (int i = 0; i < tr_graph_n_outputs(g); i++) tr_test_poison(&out[i]);
    if (tr_jax_execute(p, tr_graph_n_inputs(g), in, tr_graph_n_outputs(g), out, &e) != TR_OK)
        fail_msg("execute: %s", e.msg);
    assert_int_equal(p->kernel_calls, (uint64_t)p->n_steps);
    if (st && tr_jax_iface.get_stats(ctx, p, st, &e) != TR_OK) fail_msg("stats: %s", e.msg);
}

/* The fixture's batch (input_ids, attention_mask, token_type_ids) and labels. */
static void bert_batch(struct tr_safetensors **io, struct tr_safetensors **gr, struct tr_tensor in[4]) {
    struct tr_error e = {0};
    *io = tr_test_bert_batch(FIXTURE_IO, in, "");
    if (tr_safetensors_open(FIXTURE_GRADS, gr, &e)) fail_msg("%s", e.msg);
    if (tr_safetensors_get(*gr, "labels", &in[3], &e)) fail_msg("%s", e.msg);
}

/* BERT tiny's classifier loss and the gradient of every param: grouped, the kernel calls
 * drop by 2 per layer (3 calls become 1), and the loss and every gradient, grouped or
 * not, agree with torch (which runs each ATTENTION_GRAD by itself) to 1e-5. */
static void test_attention_backward_bert_grads(void **state) {
    struct tr_safetensors *io = NULL, *gr = NULL;
    struct tr_tensor in[4];
    struct tr_error e = {0};
    bert_batch(&io, &gr, in);
    struct tr_build_opts o = {.task = TR_TASK_PREDICT, .dtype = TR_DTYPE_F32, .batch = in[0].shape[0],
                              .seq_len = in[0].shape[1]};
    struct tr_graph *g = NULL;
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    int loss = -1;
    if (tr_bert_build_classifier_loss(tiny(), &o, g, &loss, &e)) fail_msg("%s", e.msg);
    int n_params = tr_graph_n_params(g), wrt[64], grads[64];
    assert_true(n_params > 0 && n_params <= 64);
    for (int i = 0; i < n_params; i++) wrt[i] = tr_graph_param(g, i);
    if (tr_grad(g, loss, n_params, wrt, grads, &e)) fail_msg("tr_grad: %s", e.msg);
    assert_int_equal(tr_graph_set_output(g, loss, "loss"), TR_OK);
    for (int i = 0; i < n_params; i++) assert_int_equal(tr_graph_set_output(g, grads[i], tr_node_name(g, grads[i])), 0);
    struct tr_weights *w = NULL;
    if (tr_weights_load(g, FIXTURE, &w, &e)) fail_msg("%s", e.msg);
    int n_out = tr_graph_n_outputs(g), L = (int)tiny()->num_hidden_layers;

    char dir[512];
    fresh_dir(dir, sizeof dir, "attn_bwd_bert");
    struct tr_tensor *ref = calloc((size_t)n_out, sizeof *ref);
    assert_non_null(ref);
    tr_test_run_backend(&tr_test_backends[0], dir, g, in, 1, ref, NULL);
    assert_string_equal(tr_test_backends[0].label, "torch");

    struct tr_jax_context *ctx = ctx_make(dir, NULL, 1);
    struct tr_jax_program *p[2];
    struct tr_backend_stats st[2];
    struct tr_tensor *out[2];
    for (int k = 0; k < 2; k++) { /* 0: grouped, 1: every ATTENTION_GRAD its own call */
        ctx->attn_bwd = k == 0;
        p[k] = compile_ok(ctx, g);
        out[k] = alloc_outputs(g);
        exec_ok(ctx, p[k], g, in, out[k], &st[k]);
        print_message("jax bert tiny grads, attention backward %s: %llu kernel calls; %s\n",
                      k ? "ungrouped" : "grouped", (unsigned long long)st[k].kernel_calls, st[k].notes);
    }
    check_groups(p[0], L, 3);
    check_groups(p[1], 0, 3);
    /* per layer: 3 gradient calls become 1, and the ATTENTION_LSE rides in its ATTENTION's call */
    assert_int_equal(st[1].kernel_calls - st[0].kernel_calls, (uint64_t)(3 * L));
    char want[64];
    snprintf(want, sizeof want, "fused attention_backward x%d", L);
    assert_non_null(strstr(st[0].notes, want));
    snprintf(want, sizeof want, "attention with its lse x%d", L);
    assert_non_null(strstr(st[0].notes, want));
    assert_null(strstr(st[1].notes, "attention_backward"));
    assert_null(strstr(st[1].notes, "with its lse"));

    /* Held to 1e-5: the loss, the whole gradient (‖g − g_torch‖/‖g_torch‖ over every param
     * at once) and each gradient of the attentions' q, k, v projections (what the fused
     * backward feeds); every output by itself to 1e-4, the f32 rule, since a tiny one (the
     * classifier's bias, 2 values) carries f32 rounding near 1e-5 whichever backend sums
     * it. The key biases' gradients are 0 in exact arithmetic: measured against the whole. */
    double total = 0;
    for (int i = 4; i < n_out; i++) total += norm_of(&ref[i]) * norm_of(&ref[i]);
    total = sqrt(total);
    for (int k = 0; k < 2; k++) {
        const char *how = k ? "ungrouped" : "grouped";
        double worst = -1, worst_qkv = -1, sum = 0;
        int at = 0, at_qkv = -1;
        for (int i = 0; i < n_out; i++) {
            /* a key bias's gradient is rounding noise of either side: its own norm means nothing */
            const int zero = strstr(tr_graph_output_name(g, i), "attention.self.key.bias") != NULL;
            double nr = norm_of(&ref[i]);
            double err = scaled_err(&out[k][i], &ref[i], !zero && nr > 1e-9 * total ? nr : total);
            if (i >= 4) sum += pow(scaled_err(&out[k][i], &ref[i], 1.0), 2);
            if (!(err <= worst)) worst = err, at = i;
            if (strstr(tr_graph_output_name(g, i), "attention.self.") && !(err <= worst_qkv))
                worst_qkv = err, at_qkv = i;
        }
        const struct tr_tensor *lo = &out[k][3];
        double l_ref = tr_tensor_get_f64(&ref[3], 0), loss_err = fabs(tr_tensor_get_f64(lo, 0) - l_ref) / fabs(l_ref);
        double grad_err = sqrt(sum) / total;
        print_message("jax %s vs torch: loss %.2e, whole gradient %.2e, worst q/k/v gradient %.2e (%s), worst of %d "
                      "outputs %.2e (%s)\n",
                      how, loss_err, grad_err, worst_qkv, at_qkv >= 0 ? tr_graph_output_name(g, at_qkv) : "none",
                      n_out, worst, tr_graph_output_name(g, at));
        assert_string_equal(tr_graph_output_name(g, 3), "loss");
        assert_true(at_qkv >= 0);
        if (!(loss_err < 1e-5) || !(grad_err < 1e-5) || !(worst_qkv < 1e-5))
            fail_msg("%s: loss %.3g, whole gradient %.3g, %s %.3g: relative error vs torch >= 1e-5", how, loss_err,
                     grad_err, tr_graph_output_name(g, at_qkv), worst_qkv);
        if (!(worst < 1e-4)) fail_msg("%s: %s relative error %.3g vs torch", how, tr_graph_output_name(g, at), worst);
    }
    for (int k = 0; k < 2; k++) {
        free_tensors(out[k], n_out);
        tr_jax_program_free(p[k]);
    }
    free_tensors(ref, n_out);
    tr_jax_iface.free(ctx);
    tr_weights_free(w);
    tr_graph_free(g);
    tr_safetensors_close(io);
    tr_safetensors_close(gr);
}

/* Every updated param back to the snapshot. */
static void restore_updates(struct tr_graph *g, void *const *snap) {
    for (int u = 0; u < tr_graph_n_updates(g); u++) {
        int pa = tr_graph_update_param(g, u);
        struct tr_tensor t = tr_node_tensor(g, pa);
        memcpy((void *)tr_node_data(g, pa), snap[u], tr_tensor_nbytes(&t));
    }
}

/* BERT tiny's fit graph as the fit task builds it (backward and AdamW, params updated in
 * place): 2 kernel calls fewer per layer and step, and after two steps from the same
 * state the same loss as torch (1e-5), grouped or not. */
static void test_attention_backward_bert_fit(void **state) {
    struct tr_safetensors *io = NULL, *gr = NULL;
    struct tr_tensor in[6];
    struct tr_error e = {0};
    bert_batch(&io, &gr, in);
    struct tr_graph *g =
        tr_test_model_build(&tr_model_bert, tiny(), TR_TASK_FIT, TR_DTYPE_F32, in[0].shape[0], in[0].shape[1]);
    int ids[64], n = 0, loss = tr_graph_find(g, "loss");
    assert_true(loss >= 0);
    if (tr_model_bert.trainable(tiny(), g, ids, 64, &n, &e)) fail_msg("%s", e.msg);
    struct tr_train_config tc;
    tr_train_config_defaults(&tc);
    struct tr_train_step ts;
    if (tr_train_build(g, loss, n, ids, &tc, &ts, &e)) fail_msg("train: %s", e.msg);
    struct tr_weights *w = NULL;
    if (tr_weights_load_seeded(g, FIXTURE, 7, &w, &e)) fail_msg("%s", e.msg);
    assert_int_equal(tr_graph_n_inputs(g), 6);
    in[4] = tr_test_tensor(TR_DTYPE_F32, 0, NULL);
    in[5] = tr_test_tensor(TR_DTYPE_F32, 0, NULL);
    ((float *)in[4].data)[0] = 1e-3f;
    ((float *)in[5].data)[0] = 1.0f;
    /* the state every run starts from */
    int n_up = tr_graph_n_updates(g);
    void **snap = calloc((size_t)n_up, sizeof *snap);
    assert_non_null(snap);
    for (int u = 0; u < n_up; u++) {
        int pa = tr_graph_update_param(g, u);
        struct tr_tensor t = tr_node_tensor(g, pa);
        assert_non_null(tr_node_data(g, pa));
        snap[u] = malloc(tr_tensor_nbytes(&t) + 1);
        assert_non_null(snap[u]);
        memcpy(snap[u], tr_node_data(g, pa), tr_tensor_nbytes(&t));
    }
    char dir[512];
    fresh_dir(dir, sizeof dir, "attn_bwd_fit");
    assert_int_equal(tr_graph_n_outputs(g), 1);
    struct tr_tensor ref;
    tr_test_run_backend(&tr_test_backends[0], dir, g, in, 2, &ref, NULL);
    const double loss_ref = ((const float *)ref.data)[0];
    int L = (int)tiny()->num_hidden_layers;
    struct tr_jax_context *ctx = ctx_make(dir, NULL, 1);
    uint64_t calls[2];
    for (int k = 0; k < 2; k++) {
        restore_updates(g, snap);
        ctx->attn_bwd = k == 0;
        struct tr_jax_program *p = compile_ok(ctx, g);
        check_groups(p, k ? 0 : L, 3);
        struct tr_tensor *out = alloc_outputs(g);
        struct tr_backend_stats st;
        exec_ok(ctx, p, g, in, out, NULL);
        exec_ok(ctx, p, g, in, out, &st);
        calls[k] = st.kernel_calls;
        double l = ((const float *)out[0].data)[0], err = fabs(l - loss_ref) / fabs(loss_ref);
        print_message("jax bert tiny fit, attention backward %s: %llu kernel calls per step, loss after 2 steps %.8f "
                      "(torch %.8f, rel err %.2e); %s\n",
                      k ? "ungrouped" : "grouped", (unsigned long long)calls[k], l, loss_ref, err, st.notes);
        if (!(err < 1e-5)) fail_msg("loss %.8f vs torch %.8f: relative error %.3g", l, loss_ref, err);
        free_tensors(out, 1);
        tr_jax_program_free(p);
    }
    assert_int_equal(calls[1] - calls[0], (uint64_t)(3 * L)); /* as in the grads' test */
    restore_updates(g, snap);
    for (int u = 0; u < n_up; u++) free(snap[u]);
    free(snap);
    tr_test_tensor_free(&ref);
    tr_test_tensor_free(&in[4]);
    tr_test_tensor_free(&in[5]);
    tr_jax_iface.free(ctx);
    tr_train_step_free(&ts);
    tr_weights_free(w);
    tr_graph_free(g);
    tr_safetensors_close(io);
    tr_safetensors_close(gr);
}

/* float64 attention backward: dq, dk, dv of softmax(scale·q·kᵀ + mask)·v for dy. */
enum { AB = 2, AH = 2, ATQ = 5, ATK = 7, AD = 8, ADV = 6 };

static void attn_grads_f64(const double *q, const double *k, const double *v, const double *dy, const double *mask,
                           double scale, double *dq, double *dk, double *dv) {
    memset(dq, 0, sizeof(double) * AB * AH * ATQ * AD);
    memset(dk, 0, sizeof(double) * AB * AH * ATK * AD);
    memset(dv, 0, sizeof(double) * AB * AH * ATK * ADV);
    for (int b = 0; b < AB; b++)
        for (int h = 0; h < AH; h++)
            for (int i = 0; i < ATQ; i++) {
                const double *qi = q + ((b * AH + h) * ATQ + i) * AD, *dyi = dy + ((b * AH + h) * ATQ + i) * ADV;
                double s[ATK], pr[ATK], dp[ATK], mx = -INFINITY, sum = 0, dot = 0;
                for (int j = 0; j < ATK; j++) {
                    const double *kj = k + ((b * AH + h) * ATK + j) * AD;
                    s[j] = 0;
                    for (int d = 0; d < AD; d++) s[j] += qi[d] * kj[d];
                    s[j] = s[j] * scale + (mask ? mask[b * ATK + j] : 0);
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j < ATK; j++) sum += pr[j] = exp(s[j] - mx);
                for (int j = 0; j < ATK; j++) {
                    const double *vj = v + ((b * AH + h) * ATK + j) * ADV;
                    pr[j] /= sum;
                    dp[j] = 0;
                    for (int d = 0; d < ADV; d++) dp[j] += dyi[d] * vj[d];
                    dot += pr[j] * dp[j];
                }
                for (int j = 0; j < ATK; j++) {
                    double ds = pr[j] * (dp[j] - dot) * scale;
                    const double *kj = k + ((b * AH + h) * ATK + j) * AD;
                    double *dkj = dk + ((b * AH + h) * ATK + j) * AD, *dvj = dv + ((b * AH + h) * ATK + j) * ADV;
                    for (int d = 0; d < AD; d++) {
                        dq[((b * AH + h) * ATQ + i) * AD + d] += ds * kj[d];
                        dkj[d] += ds * qi[d];
                    }
                    for (int d = 0; d < ADV; d++) dvj[d] += pr[j] * dyi[d];
                }
            }
}

/* Only dq and dv used (dk made, then dropped as dead code): a group of 2 at dv (the
 * first), dk not asked of the kernel; outputs read dv before dq is otherwise computed. */
static void attention_backward_dq_dv(int with_mask) {
    struct tr_graph *g = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    const int64_t sq[4] = {AB, AH, ATQ, AD}, sk[4] = {AB, AH, ATK, AD}, sv[4] = {AB, AH, ATK, ADV},
                  sy[4] = {AB, AH, ATQ, ADV}, sm[4] = {AB, 1, 1, ATK};
    int in[5] = {tr_input(g, "q", TR_DTYPE_F32, 4, sq), tr_input(g, "k", TR_DTYPE_F32, 4, sk),
                 tr_input(g, "v", TR_DTYPE_F32, 4, sv), tr_input(g, "dy", TR_DTYPE_F32, 4, sy),
                 with_mask ? tr_input(g, "mask", TR_DTYPE_F32, 4, sm) : -1};
    const int n_in = with_mask ? 5 : 4;
    struct tr_attrs a = {.n_ints = 3};
    a.floats[0] = 0.3f;
    int node[3];
    const int order[3] = {2, 1, 0}; /* dv, dk, dq */
    for (int i = 0; i < 3; i++) {
        a.ints[2] = order[i];
        node[order[i]] = tr_graph_add_node(g, TR_OP_ATTENTION_GRAD, n_in, in, &a);
        if (i == 0) node[2] = tr_scale(g, node[2], 2.0f, 0.0f); /* dv read before dq's node */
    }
    (void)node[1]; /* dk: no reader */
    assert_int_equal(tr_graph_set_output(g, node[0], "dq"), TR_OK);
    assert_int_equal(tr_graph_set_output(g, node[2], "dv2"), TR_OK);
    if (tr_graph_status(g, &e)) fail_msg("%s", e.msg);

    struct tr_tensor x[5];
    const int64_t *shapes[5] = {sq, sk, sv, sy, sm};
    double *r[5] = {0};
    for (int i = 0; i < n_in; i++) {
        x[i] = tr_test_tensor(TR_DTYPE_F32, 4, shapes[i]);
        tr_test_randn(&x[i], 900 + (uint64_t)i, 1.0);
        if (i == 4)
            for (int64_t j = 0; j < tr_tensor_numel(&x[i]); j++) tr_tensor_set_f64(&x[i], j, (j % 3 == 1) ? -1e4 : 0.0);
        r[i] = tr_test_to_f64(&x[i]);
    }
    double *dq = malloc(sizeof(double) * AB * AH * ATQ * AD), *dk = malloc(sizeof(double) * AB * AH * ATK * AD),
           *dv = malloc(sizeof(double) * AB * AH * ATK * ADV);
    assert_true(dq && dk && dv);
    attn_grads_f64(r[0], r[1], r[2], r[3], with_mask ? r[4] : NULL, 0.3, dq, dk, dv);
    for (int i = 0; i < AB * AH * ATK * ADV; i++) dv[i] *= 2;

    char dir[512];
    fresh_dir(dir, sizeof dir, with_mask ? "attn_bwd_dqdv_mask" : "attn_bwd_dqdv");
    struct tr_jax_context *ctx = ctx_make(dir, NULL, 1);
    int n_steps[2];
    for (int k = 0; k < 2; k++) {
        ctx->attn_bwd = k == 0;
        struct tr_jax_program *p = compile_ok(ctx, g);
        check_groups(p, k ? 0 : 1, 2);
        if (k == 0) {
            const struct jax_attn_bwd *ab = &p->fusion.attn[0];
            assert_int_equal(ab->grad[1], -1);
            assert_true(ab->lead == ab->grad[2] && ab->grad[2] < ab->grad[0]);
        }
        n_steps[k] = p->n_steps;
        struct tr_tensor *out = alloc_outputs(g);
        struct tr_backend_stats st;
        exec_ok(ctx, p, g, x, out, &st);
        if (k == 0) assert_non_null(strstr(st.notes, "fused attention_backward x1 (1 with 2 of 3 gradients)"));
        double eq = tr_test_rel_err(&out[0], dq), ev = tr_test_rel_err(&out[1], dv);
        print_message("jax attention backward dq, dv%s (%s): rel err vs float64 dq %.2e, dv %.2e\n",
                      with_mask ? " with a mask" : "", k ? "ungrouped" : "grouped", eq, ev);
        if (!(eq < 1e-4) || !(ev < 1e-4)) fail_msg("dq %.3g, dv %.3g relative error >= 1e-4", eq, ev);
        free_tensors(out, 2);
        tr_jax_program_free(p);
    }
    assert_int_equal(n_steps[1] - n_steps[0], 1);
    tr_jax_iface.free(ctx);
    for (int i = 0; i < n_in; i++) {
        tr_test_tensor_free(&x[i]);
        free(r[i]);
    }
    free(dq);
    free(dk);
    free(dv);
    tr_graph_free(g);
}

static void test_attention_backward_dq_dv(void **state) {
    attention_backward_dq_dv(1);
    attention_backward_dq_dv(0);
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_attention_backward_bert_grads,
             test_attention_backward_bert_fit, test_attention_backward_dq_dv)
