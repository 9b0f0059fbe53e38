// One cold start of llama.cpp (node-llama-cpp 3.21.1's prebuilt linux-x64 CPU libllama/ggml) on
// a GGUF file, in this fresh process: import node-llama-cpp, load the backend, load the model
// (mmap, llama.cpp's default), create a context, evaluate the prompt and take one greedy token,
// exit. Prints one line of JSON; times are seconds since T0_NS (the shell's clock when it
// started this process, `date +%s%N`; without it, since node's performance.timeOrigin).
// Usage: T0_NS=$(date +%s%N) node first_token.mjs MODEL.gguf [CONTEXT_SIZE] [THREADS]
import { performance } from "node:perf_hooks";

const tNs = () => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));
const t0 = process.env.T0_NS ? BigInt(process.env.T0_NS) : BigInt(Math.round(performance.timeOrigin * 1e6));
const since = () => Number(tNs() - t0) / 1e9;
const r = (x) => Math.round(x * 1000) / 1000;
const out = { node_timeorigin_s: r(Number(BigInt(Math.round(performance.timeOrigin * 1e6)) - t0) / 1e9), script_s: r(since()) };

const [model_path, ctxArg = "2048", threadsArg = "2"] = process.argv.slice(2);
const contextSize = Number(ctxArg), threads = Number(threadsArg);
const { getLlama, LlamaLogLevel } = await import("node-llama-cpp");
out.import_s = r(since());
// build "never" + skipDownload: the prebuilt binary or an error, never a download or a build.
const llama = await getLlama({ build: "never", skipDownload: true, gpu: false, usePrebuiltBinaries: true,
                               maxThreads: threads, logLevel: LlamaLogLevel.error, progressLogs: false });
out.backend_s = r(since());
const model = await llama.loadModel({ modelPath: model_path, gpuLayers: 0 });  // useMmap "auto": mmap
out.model_s = r(since());
const context = await model.createContext({ contextSize, threads, batchSize: 512, sequences: 1 });
out.context_s = r(since());
const seq = context.getSequence();
// BOS + "hello", as weir generate encodes it (4 tokens with weir's test tokenizer).
const prompt = [...(model.tokens.bos != null ? [model.tokens.bos] : []), ...model.tokenize("hello")];
let first;
for await (const tok of seq.evaluate(prompt, { temperature: 0 })) { first = tok; break; }
out.first_token_s = r(since());
out.rss_kb = Math.round(process.memoryUsage().rss / 1024);  // once the first token is out (as time %M)
Object.assign(out, { prompt_tokens: prompt.length, token: first, context_size: context.contextSize,
                     threads: context.currentThreads, mmap: model.useMmap, binary: llama.buildType,
                     gpu: llama.gpu, llama_cpp: llama.llamaCppRelease?.release });
console.log(JSON.stringify(out));
process.exit(0);
