// llamacpp-server.mjs serves a GGUF file through node-llama-cpp (llama.cpp's prebuilt CPU
// binary) behind the subset of Ollama's /api/generate that scripts/bench sends, so the bench
// measures llama.cpp exactly as it measures Ollama: raw prompt in, NDJSON stream out, with
// prompt_eval_count/duration and eval_count/duration (nanoseconds) on the final line.
//
//   LLAMACPP_HOST=127.0.0.1:PORT LLAMACPP_THREADS=2 LLAMACPP_CONTEXT=5120 node llamacpp-server.mjs
//
// The request's "model" is the GGUF path; it is loaded on the first request and kept. Like
// llama-server, one sequence keeps its tokens between requests, so a prompt that begins like
// the previous one reuses that prefix (prompt_eval_count counts only the tokens evaluated).
// The bench writes this file next to the node_modules where it installed node-llama-cpp (ES
// modules resolve packages from the script's own folder, not from NODE_PATH).
import http from "node:http";
import {getLlama, LlamaCompletion} from "node-llama-cpp";

const [host, port] = (process.env.LLAMACPP_HOST ?? "127.0.0.1:11435").split(":");
const threads = Number(process.env.LLAMACPP_THREADS ?? 2);
const contextSize = Number(process.env.LLAMACPP_CONTEXT ?? 4096);

// build "never": use the prebuilt binary only, never try to download or compile at run time.
const llama = await getLlama({gpu: false, build: "never", maxThreads: threads, progressLogs: false, logLevel: "warn"});
let loaded = null; // {path, model, sequence, completion}

async function load(path) {
    if (loaded?.path === path) return loaded;
    if (loaded) await loaded.model.dispose();
    const model = await llama.loadModel({modelPath: path});
    const context = await model.createContext({contextSize, threads, sequences: 1});
    const sequence = context.getSequence();
    loaded = {path, model, sequence, completion: new LlamaCompletion({contextSequence: sequence})};
    return loaded;
}

// commonPrefix is how many leading tokens a and b share.
function commonPrefix(a, b) {
    let i = 0;
    while (i < a.length && i < b.length && a[i] === b[i]) i++;
    return i;
}

async function generate(req, res) {
    const body = JSON.parse(await new Promise((ok, fail) => {
        let s = "";
        req.on("data", (c) => s += c).on("end", () => ok(s)).on("error", fail);
    }));
    const o = body.options ?? {};
    const m = await load(body.model);
    const tokens = m.model.tokenize(body.prompt ?? "", true);
    res.writeHead(200, {"Content-Type": "application/x-ndjson"});
    if (tokens.length === 0) { // a load request, as the bench sends after a restart
        res.end(JSON.stringify({response: "", done: true}) + "\n");
        return;
    }
    // The last prompt token is always evaluated, to sample from.
    const evaluated = tokens.length - Math.min(commonPrefix(m.sequence.contextTokens, tokens), tokens.length - 1);
    const t0 = process.hrtime.bigint();
    let first = 0n, last = 0n, n = 0;
    await m.completion.generateCompletion(tokens, {
        maxTokens: o.num_predict ?? 128, temperature: o.temperature ?? 1, seed: o.seed ?? 42, repeatPenalty: false,
        onToken(ts) {
            last = process.hrtime.bigint();
            if (n === 0) first = last;
            n += ts.length;
            res.write(JSON.stringify({response: m.model.detokenize(ts), done: false}) + "\n");
        },
    });
    // Prefill ends with the first token; decode is the tokens after it over the time after it.
    res.end(JSON.stringify({
        response: "", done: true,
        prompt_eval_count: evaluated, prompt_eval_duration: Number((n > 0 ? first : process.hrtime.bigint()) - t0),
        eval_count: Math.max(n - 1, 0), eval_duration: Number(last - first),
    }) + "\n");
}

let queue = Promise.resolve(); // one request at a time, like OLLAMA_NUM_PARALLEL=1
http.createServer((req, res) => {
    if (req.method === "GET" && req.url === "/") {
        res.end("llama.cpp (node-llama-cpp) is running");
        return;
    }
    if (req.method !== "POST" || req.url !== "/api/generate") {
        res.writeHead(404).end(JSON.stringify({error: "only POST /api/generate"}));
        return;
    }
    queue = queue.then(() => generate(req, res)).catch((e) => {
        if (!res.headersSent) res.writeHead(500);
        res.end(JSON.stringify({error: String(e?.stack ?? e)}) + "\n");
    });
}).listen(Number(port), host);
