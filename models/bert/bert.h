/* BERT (Hugging Face BertForSequenceClassification) as a trident model.
 *
 * Graph of predict, for batch B and seq_len T (D hidden, dtype the build's):
 *   inputs, in order:  input_ids i32 [B,T], attention_mask f32 [B,T] (1 keep, 0 pad),
 *                      token_type_ids i32 [B,T]
 *   outputs, in order: logits [B,num_labels], last_hidden_state [B,T,D], pooler_output [B,D]
 * Parameters are named as the state_dict of transformers' BertForSequenceClassification
 * ("bert.encoder.layer.0.attention.self.query.weight", "classifier.bias", ...); Linear
 * weights are [out,in] as there. From a seed: normal(0, 0.02) for every weight and bias,
 * LayerNorm weights normal(1, 0.02), so that no bias is zero.
 */
#ifndef TRIDENT_MODELS_BERT_H
#define TRIDENT_MODELS_BERT_H

#include <stdint.h>
#include "trident/model.h"

/* The keys of [model]; names as in transformers' BertConfig (hidden_act "gelu", the erf
 * form, in every preset). pad_fraction shapes the synthetic attention mask (make_inputs). */
struct tr_bert_config {
    int64_t vocab_size;
    int64_t hidden_size;
    int64_t num_hidden_layers;
    int64_t num_attention_heads;
    int64_t intermediate_size;
    int64_t max_position_embeddings;
    int64_t type_vocab_size;
    int64_t num_labels;
    double layer_norm_eps;
    char hidden_act[64];        /* the feed-forward's: transformers' ACT2FN name (layers.h TR_NN_ACTS) */
    char problem_type[64];      /* fit's loss, as transformers': single_label_classification,
                                   regression or multi_label_classification; "": regression for
                                   num_labels 1, else single_label_classification */
    double pad_fraction;
    int64_t pad_token_id;       /* the word embedding's padding row (no gradient); -1: none */
    /* LoRA (peft's LoraConfig; keras-hub's enable_lora). lora_rank 0: off, the graph is
     * the plain model. lora_rank r > 0: every target Linear W (out,in) gets PARAMs
     * "<layer>.lora_A.weight" (r,in), normal(0, 1/r), and "<layer>.lora_B.weight" (out,r),
     * zeros, and computes x·Wᵀ + b + (lora_alpha/r)·(x·Aᵀ)·Bᵀ; base parameters keep their
     * names and shapes. lora_alpha 0 means alpha = r (scaling 1). lora_targets: a
     * comma-separated subset of query, key, value (attention.self.*), attention_output
     * (attention.output.dense), intermediate (intermediate.dense), output (output.dense);
     * "" means "query,value" (peft's default for BERT). The pooler and classifier are
     * never adapted. */
    int64_t lora_rank;
    double lora_alpha;
    char lora_targets[64];
};

/* Synthetic batch: tokens uniform in [0, vocab_size) from the seed; sample b keeps its
 * first tr_bert_tokens_kept(b) tokens = T - floor((b mod 4)·pad_fraction·T), at least 1
 * (pad_fraction 0.125: T, 7T/8, 3T/4, 5T/8); token type 0 for t < T/2, then 1. */
int tr_bert_tokens_kept(const struct tr_bert_config *c, int64_t b, int64_t seq_len);

struct tr_graph;
struct tr_error;

/* The predict graph above (its three inputs, and its three outputs unless the opts' task
 * is fit: a fit graph's one output is the loss, marked by core), plus a fourth
 * input "labels" and a node "loss", the 0-d f32 loss BertForSequenceClassification
 * computes for c's problem_type:
 *   single_label_classification  labels i32 [B] in [0, num_labels): the mean cross-entropy;
 *   regression                    labels f32 [B] (num_labels 1) or [B, num_labels]: the
 *                                 mean squared error of the logits;
 *   multi_label_classification    labels f32 [B, num_labels], 0 or 1: the mean binary
 *                                 cross-entropy of the logits (BCEWithLogitsLoss).
 * The loss is not marked as an output; *loss gets its id. */
int tr_bert_build_classifier_loss(const struct tr_bert_config *c, const struct tr_build_opts *o, struct tr_graph *g,
                                  int *loss, struct tr_error *err);

/* The PARAM ids of g (built from c) that training updates, in graph order: with
 * lora_rank > 0, every lora_A/lora_B adapter plus classifier.weight and classifier.bias
 * (the classification head is new to the task, so it trains with the adapters, as
 * keras-hub's enable_lora and peft's SEQ_CLS modules_to_save do); with lora_rank 0,
 * every PARAM (full fine-tuning). *n gets the count; more than max is an error (ids
 * then holds the first max). */
int tr_bert_trainable_params(const struct tr_bert_config *c, const struct tr_graph *g, int *ids, int max, int *n,
                             struct tr_error *err);

#endif
