// llamacpp-stream.mjs runs one measured generation of the stream scenario in llama.cpp
// (npm node-llama-cpp, its prebuilt CPU binary): the GGUF mapped as llama.cpp maps it,
// the prompt given as token ids, then tokens sampled at temperature 1 from a fixed seed.
// It prints one JSON line: load and prompt seconds, decode tokens per second, the tokens.
//
//   node llamacpp-stream.mjs MODEL.gguf '{"prompt":[...],"decode":40,"threads":2}'
//
// The bench writes it next to the node_modules where it installed node-llama-cpp.
import {getLlama} from "node-llama-cpp";

const [path, raw] = process.argv.slice(2);
const o = JSON.parse(raw);
const out = {tokens: []};
try {
    const t0 = process.hrtime.bigint();
    const llama = await getLlama({gpu: false, build: "never", maxThreads: o.threads, progressLogs: false, logLevel: "warn"});
    const model = await llama.loadModel({modelPath: path, useMmap: true});
    const context = await model.createContext({contextSize: 512, threads: o.threads, sequences: 1, batchSize: 512});
    const seq = context.getSequence();
    const t1 = process.hrtime.bigint();
    out.load_s = Number(t1 - t0) / 1e9;
    const steps = [];
    let last = t1;
    for await (const tok of seq.evaluate(o.prompt, {temperature: 1, seed: 42, topK: 0, topP: 1, minP: 0})) {
        const now = process.hrtime.bigint();
        if (out.tokens.length === 0) out.ttft_s = Number(now - t1) / 1e9;
        else steps.push(Number(now - last) / 1e9);
        last = now;
        out.tokens.push(tok);
        if (out.tokens.length >= o.decode + 1) break;
    }
    const decode = steps.reduce((a, b) => a + b, 0);
    out.decode_tps = steps.length / decode;
    steps.sort((a, b) => a - b);
    out.step_median_s = steps[Math.floor(steps.length / 2)];
} catch (e) {
    out.error = String(e?.message ?? e);
}
console.log(JSON.stringify(out));
process.exit(0);
