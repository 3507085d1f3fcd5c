/* suites.h — every Check suite of the test runner, one per module. */
#ifndef TDBG_SUITES_H
#define TDBG_SUITES_H

#include <check.h>

Suite *suite_core(void);        /* tensors, dtypes, allocator, tape, errors, hooks, rng, inject */
Suite *suite_linear(void);      /* matmul, linear */
Suite *suite_elementwise(void); /* add..div, scale, activations, exp/log/sqrt */
Suite *suite_reduce(void);      /* sum, mean, softmax, log_softmax */
Suite *suite_loss(void);        /* cross_entropy, mse */
Suite *suite_conv(void);        /* conv2d, pools */
Suite *suite_norm(void);        /* batchnorm, layernorm */
Suite *suite_attention_ops(void); /* batched matmul, masked fill, masked softmax, causal attention */
Suite *suite_shape(void);       /* reshape, flatten, transpose, cast, embedding, dropout */
Suite *suite_optim(void);       /* SGD, Adam, AdamW, clipping, accumulation, determinism */
Suite *suite_scaler(void);      /* loss scaling: GradScaler's sequence, hysteresis, unscale, skips, master weights */
Suite *suite_data(void);        /* datasets and the loader */
Suite *suite_log(void);         /* TDBG_LOG: levels per component, the line's format, the file */
Suite *suite_provenance(void);  /* which sample: batch provenance, data checks, data skip, failing ops */
Suite *suite_plan(void);        /* the static memory planner of graph mode */
Suite *suite_graph(void);       /* graph mode: passes, plans, shapes, observation, parity */
Suite *suite_lowp_native(void);   /* native low-precision kernels (oneDNN GEMM/conv; ReLU, BatchNorm, MaxPool2D) against the shadow path */
Suite *suite_fused_attention(void); /* the fused causal attention kernel and graph mode's pass */
Suite *suite_dbg_cmd(void);     /* the command layer: lookup, breakpoint commands, bad input */
Suite *suite_dbg_cond(void);    /* tensor statistics and the breakpoint condition language */
Suite *suite_dbg_print(void);   /* tensor references, slices, printing, histograms */
Suite *suite_dump_spec(void);   /* the dump spec language */
Suite *suite_dump_h5(void);     /* HDF5 step files and run.h5: round trips, validation, disk errors */
Suite *suite_dump(void);        /* dump sessions: round trips, selection, stats, cap, errors */
Suite *suite_tdbg_dump(void);   /* the tdbg-dump inspector: ls, show, stats, export, verify */
Suite *suite_dump_damage(void);  /* every dump reader on damaged, truncated, hostile files */
Suite *suite_tdbg_diff(void);   /* tdbg-diff: pairing, metrics, verdicts, formats, damaged dumps */
Suite *suite_diff_ranks(void);  /* data parallel: a rank's run.h5, tdbg-diff --ranks, the ranks against one process */
Suite *suite_tdbg_prof(void);   /* tdbg-prof: tables on crafted traces, diff, damaged and hostile traces */
Suite *suite_dump_amp(void);    /* mixed precision in dumps (amp level, loss scale, skips) and the TUI's tracking */
Suite *suite_verdict(void);     /* backward ops' reads and the verdict, over the whole op table */
Suite *suite_cmd_args(void);    /* command arguments refused or meant, step N, quit's status, the launcher's truth */
Suite *suite_dbg_prof(void);    /* the debugger's profile commands: around nan, start/stop/save, info profile */
Suite *suite_dbg_amp(void);     /* the debugger on mixed precision: overflow, underflow, skip, compare f32, info amp */
Suite *suite_debugger(void);    /* tdbg sessions in batch mode: faults found, commands */
Suite *suite_crash(void);       /* crash reports: injected and natural crashes, exit() mid-step, CLI and TUI */
Suite *suite_tui(void);         /* the terminal UI driven under tmux: stops, keys, resize, restore */
Suite *suite_tui_prof(void);    /* the TUI's profile pane and ms/step, drawn in-process */
Suite *suite_examples(void);    /* the example programs: flags, convergence, injection */
Suite *suite_gpt_example(void); /* examples/gpt: learning, samples, checkpoints, modes, a NaN in attention */
Suite *suite_checkpoint(void);  /* the examples' --save/--load: exact resume, damaged and mismatched files */
Suite *suite_exports(void);     /* the shared libraries' exports: te.h's TE_API, the plugin's entry */
Suite *suite_names(void);       /* names checked at once or after the first step: types, globs, injections, conditions */
Suite *suite_prof(void);        /* the profiler: spec, ring, Chrome trace JSON, nesting, cost model */
Suite *suite_amp(void);         /* mixed precision: levels, autocast, rounding against PyTorch, eager/graph parity */
Suite *suite_gpt(void);         /* examples/gpt's model against PyTorch: logits, loss, gradients, training losses */
Suite *suite_residency(void);  /* where tensor data lives: slices, te_tensor_to, devices, dispatch, per-device memory */
Suite *suite_record(void);     /* time travel: record, rewind, replay bit for bit, diverged, locate */
Suite *suite_dbg_record(void); /* the debugger's time travel: rewind to a NaN's past and stop there again, reverse-step/next, replay with a dump, diverged */
Suite *suite_listen(void);     /* attaching, the run's side: frames, TDBG_LISTEN, the socket's modes, uid and token checks, refusals, the hand-off, no leaks */
Suite *suite_job(void);        /* tdbg --mpi: one debugger for a 2-rank job under mpirun (skipped without it) */
Suite *suite_attach(void);     /* attaching end to end: tdbg attach, break nan, detach with the same losses, no leaks, kill -9, refusals, quit */
Suite *suite_watch(void);      /* the deferred NaN watch: the same stops, replays bit for bit */
#ifdef TE_HAVE_CUDA
Suite *suite_cuda_elementwise(void); /* CUDA elementwise, shape and cast kernels against the CPU's; their shared per-element code */
Suite *suite_cuda_linear(void); /* CUDA matmul, linear (f32, f16/bf16 tensor cores, epilogues), fused attention against the CPU's */
Suite *suite_cuda_reduce(void); /* CUDA: reductions, losses, layer norm, pooling, statistics, optimizer, unscale */
Suite *suite_cuda_conv(void);   /* conv2d, pools, batch norm on the CUDA backend against the CPU */
Suite *suite_cuda_ops(void);    /* every op of the op table on CUDA against the CPU; eager/graph; the NaN stop */
#endif
Suite *suite_residency(void);  /* where tensor data lives: slices, te_tensor_to, devices, dispatch, per-device memory */

#endif
