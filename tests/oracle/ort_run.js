#!/usr/bin/env node
// Run an ONNX model with onnxruntime-node: the independent runtime that
// tessera's outputs and latency are compared against (tests/integration/
// real_models.sh, bench/single-device).
//
// Usage:
//   node ort_run.js MODEL.onnx --input x.npy [--input ...] [--output y.npy ...]
//        [--threads N] [--repeat N] [--warmup N] [--opt all|extended|basic|disabled] [--json]
//        [--profile PREFIX]
//
// Inputs are float32 .npy files bound to the session's inputs in declaration
// order (dynamic dims take the .npy's shape). --repeat N times N runs after
// --warmup runs and reports the median. Threads: intraOpNumThreads=N,
// interOpNumThreads=1, sequential execution. onnxruntime-node is found through
// NODE_PATH (the scripts point it at their npm cache).
//
// --profile PREFIX turns on onnxruntime's profiler for the timed runs and
// writes its Chrome-trace JSON to PREFIX_<date>.json (the path is printed on
// stderr): per-node kernel times after onnxruntime's graph rewrites, to
// compare with `tessera run --profile`.
//
// --json prints {"outputs":[{"name","shape","checksum"}],"seconds","median_ms",
// "runs_ms","ort_version"}; checksum is the plain sum of the output's values.
'use strict';

const fs = require('fs');

function usage(msg) {
  process.stderr.write(`ort_run.js: ${msg}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const a =
      {model: null, inputs: [], outputs: [], threads: 1, repeat: 1, warmup: 1, opt: 'all', json: false, profile: null};
  for (let i = 0; i < argv.length; ++i) {
    const k = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) usage(`${k} needs a value`);
      return argv[++i];
    };
    if (k === '--input') a.inputs.push(next());
    else if (k === '--output') a.outputs.push(next());
    else if (k === '--threads') a.threads = parseInt(next(), 10);
    else if (k === '--repeat') a.repeat = parseInt(next(), 10);
    else if (k === '--warmup') a.warmup = parseInt(next(), 10);
    else if (k === '--opt') a.opt = next();
    else if (k === '--json') a.json = true;
    else if (k === '--profile')
      a.profile = next();
    else if (k.startsWith('--')) usage(`unknown option ${k}`);
    else if (a.model === null) a.model = k;
    else usage(`unexpected argument ${k}`);
  }
  if (!a.model) usage('missing MODEL');
  if (!(a.threads >= 1) || !(a.repeat >= 1) || !(a.warmup >= 0)) usage('bad --threads/--repeat/--warmup');
  if (!['all', 'extended', 'basic', 'disabled'].includes(a.opt)) usage(`bad --opt ${a.opt}`);
  return a;
}

// NumPy .npy (format 1.0-3.0), little-endian float32, C order only.
function readNpy(path) {
  const buf = fs.readFileSync(path);
  if (buf.length < 10 || buf.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error(`${path}: not a .npy file`);
  const major = buf[6];
  let headerLen, offset;
  if (major === 1) { headerLen = buf.readUInt16LE(8); offset = 10; }
  else if (major === 2 || major === 3) { headerLen = buf.readUInt32LE(8); offset = 12; }
  else throw new Error(`${path}: unsupported .npy version ${major}`);
  const header = buf.toString('latin1', offset, offset + headerLen);
  const descr = /'descr'\s*:\s*'([^']*)'/.exec(header);
  const fortran = /'fortran_order'\s*:\s*(True|False)/.exec(header);
  const shape = /'shape'\s*:\s*\(([^)]*)\)/.exec(header);
  if (!descr || !fortran || !shape) throw new Error(`${path}: malformed .npy header`);
  if (descr[1] !== '<f4' && descr[1] !== '=f4') throw new Error(`${path}: dtype ${descr[1]}, expected float32 '<f4'`);
  if (fortran[1] === 'True') throw new Error(`${path}: Fortran-order arrays are not supported`);
  const dims = shape[1].split(',').map(s => s.trim()).filter(s => s.length).map(s => parseInt(s, 10));
  const count = dims.reduce((x, y) => x * y, 1);
  const dataStart = offset + headerLen;
  if (buf.length - dataStart < count * 4) throw new Error(`${path}: truncated data`);
  // Copy into an aligned buffer: Float32Array needs 4-byte alignment.
  const data = new Float32Array(count);
  Buffer.from(data.buffer).set(buf.subarray(dataStart, dataStart + count * 4));
  return {dims, data};
}

function writeNpy(path, dims, data) {
  const shapeStr = dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
  let header = `{'descr': '<f4', 'fortran_order': False, 'shape': ${shapeStr}, }`;
  const pad = 64 - ((10 + header.length + 1) % 64);
  header += ' '.repeat(pad % 64) + '\n';
  const pre = Buffer.alloc(10);
  pre.write('\x93NUMPY', 0, 'latin1');
  pre[6] = 1;
  pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  const f32 = Float32Array.from(data);
  fs.writeFileSync(path, Buffer.concat([pre, Buffer.from(header, 'latin1'), Buffer.from(f32.buffer)]));
}

function median(xs) {
  const s = [...xs].sort((x, y) => x - y);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  let ort;
  try {
    ort = require('onnxruntime-node');
  } catch (e) {
    process.stderr.write(`ort_run.js: cannot load onnxruntime-node (set NODE_PATH to its node_modules): ${e.message}\n`);
    process.exit(3);
  }
  const session = await ort.InferenceSession.create(args.model, {
    intraOpNumThreads: args.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: args.opt,
    enableProfiling: args.profile !== null,
    ...(args.profile !== null ? {profileFilePrefix: args.profile} : {}),
  });
  if (args.inputs.length !== session.inputNames.length) {
    usage(`${args.model} has ${session.inputNames.length} inputs (${session.inputNames.join(', ')}), got ${args.inputs.length} --input`);
  }
  const feeds = {};
  session.inputNames.forEach((name, i) => {
    const t = readNpy(args.inputs[i]);
    feeds[name] = new ort.Tensor('float32', t.data, t.dims);
  });

  let results;
  for (let i = 0; i < args.warmup; ++i) results = await session.run(feeds);
  const runsMs = [];
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < args.repeat; ++i) {
    const s = process.hrtime.bigint();
    results = await session.run(feeds);
    runsMs.push(Number(process.hrtime.bigint() - s) / 1e6);
  }
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9 / args.repeat;
  if (args.profile !== null) {
    const file = session.endProfiling();
    process.stderr.write(`ort_run.js: profile written to ${file || '(onnxruntime did not say where)'}\n`);
  }

  const outputs = session.outputNames.map((name, i) => {
    const t = results[name];
    if (t.type !== 'float32') throw new Error(`output ${name} has type ${t.type}, expected float32`);
    if (i < args.outputs.length) writeNpy(args.outputs[i], t.dims, t.data);
    let sum = 0;
    for (const v of t.data) sum += v;
    return {name, shape: Array.from(t.dims, Number), checksum: sum};
  });
  const report = {
    outputs,
    seconds,
    median_ms: median(runsMs),
    runs_ms: runsMs,
    ort_version: (ort.env && ort.env.versions && ort.env.versions.node) || 'unknown',
  };
  if (args.json) {
    process.stdout.write(JSON.stringify(report) + '\n');
  } else {
    for (const o of outputs) console.log(`${o.name} shape=[${o.shape.join(',')}] checksum=${o.checksum}`);
    console.log(`median ${report.median_ms.toFixed(3)} ms over ${args.repeat} runs (threads ${args.threads}, opt ${args.opt})`);
  }
}

main().catch(e => {
  process.stderr.write(`ort_run.js: ${e && e.message ? e.message : e}\n`);
  process.exit(1);
});
