/**
 * Prometheus' text exposition format (what every role serves at /metrics),
 * as another node of the fleet sent it: untrusted input. The reader keeps
 * only the families it is asked for, takes the text in pieces as it comes,
 * and bounds what it holds whatever the text says: a line longer than
 * `maxLineChars` is skipped, a family past `maxSamples` keeps its first
 * ones, a label value past `maxLabelChars` is cut. It never throws on bad
 * text: a line it cannot read is skipped.
 */

export interface Sample {
  readonly labels: Readonly<Record<string, string>>;
  /** As written: NaN and ±Inf included; the reader's users decide what they mean. */
  readonly value: number;
}

/**
 * The families asked for that the text named (in a `# HELP` or `# TYPE`
 * line, or by a sample), each with its samples: a family declared without
 * samples has an empty list (nothing counted yet), one the text never named
 * is absent (the node does not report it).
 */
export type Exposition = ReadonlyMap<string, readonly Sample[]>;

export interface ExpositionLimits {
  /** Default 16384 characters. */
  readonly maxLineChars?: number;
  /** Samples kept per family, default 4096. */
  readonly maxSamples?: number;
  /** Default 256 characters. */
  readonly maxLabelChars?: number;
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*/;

function numberOf(text: string): number {
  switch (text) {
    case '+Inf':
    case 'Inf':
      return Infinity;
    case '-Inf':
      return -Infinity;
    case 'NaN':
      return NaN;
  }
  // Number('') and Number('0x10') are not what the format means: only decimal and exponent forms.
  return /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text) ? Number(text) : NaN;
}

/**
 * One sample line (`name{a="x",b="y\"z"} 1.5 [timestamp]`): its name, labels
 * (escapes `\\`, `\"`, `\n` undone) and value; undefined when it is not one.
 */
export function parseSampleLine(line: string, maxLabelChars = 256): { name: string; sample: Sample } | undefined {
  const name = NAME.exec(line)?.[0];
  if (name === undefined) return undefined;
  let i = name.length;
  const labels: Record<string, string> = Object.create(null) as Record<string, string>;
  if (line[i] === '{') {
    i++;
    for (;;) {
      while (line[i] === ' ' || line[i] === ',') i++;
      if (line[i] === '}') {
        i++;
        break;
      }
      const label = LABEL_NAME.exec(line.slice(i, i + 256))?.[0];
      if (label === undefined || line[i + label.length] !== '=' || line[i + label.length + 1] !== '"') return undefined;
      i += label.length + 2;
      let value = '';
      for (;;) {
        const c = line[i++];
        if (c === undefined) return undefined;
        if (c === '"') break;
        if (c === '\\') {
          const e = line[i++];
          value += e === 'n' ? '\n' : (e ?? '');
        } else value += c;
      }
      labels[label] = value.length > maxLabelChars ? value.slice(0, maxLabelChars) : value;
    }
  }
  const rest = line.slice(i).trim().split(/\s+/);
  if (rest.length < 1 || rest.length > 2 || rest[0] === '') return undefined;
  return { name, sample: { labels, value: numberOf(rest[0]!) } };
}

/** Reads an exposition in pieces (`write`), keeping the `wanted` families; `end()` answers them. */
export class ExpositionReader {
  private readonly families = new Map<string, Sample[]>();
  private readonly maxLineChars: number;
  private readonly maxSamples: number;
  private readonly maxLabelChars: number;
  /** The unfinished last line of what was written so far. */
  private rest = '';
  /** The line being written is past maxLineChars: skipped up to its end. */
  private skipping = false;

  constructor(
    private readonly wanted: ReadonlySet<string>,
    limits: ExpositionLimits = {},
  ) {
    this.maxLineChars = limits.maxLineChars ?? 16_384;
    this.maxSamples = limits.maxSamples ?? 4096;
    this.maxLabelChars = limits.maxLabelChars ?? 256;
  }

  write(text: string): void {
    let from = 0;
    for (let nl = text.indexOf('\n'); nl >= 0; nl = text.indexOf('\n', from)) {
      const piece = text.slice(from, nl);
      from = nl + 1;
      if (this.skipping || this.rest.length + piece.length > this.maxLineChars) {
        this.skipping = false;
        this.rest = '';
        continue;
      }
      this.line(this.rest + piece);
      this.rest = '';
    }
    if (this.skipping) return;
    this.rest += text.slice(from);
    if (this.rest.length > this.maxLineChars) {
      this.rest = '';
      this.skipping = true;
    }
  }

  end(): Exposition {
    if (!this.skipping && this.rest !== '') this.line(this.rest);
    this.rest = '';
    this.skipping = false;
    return this.families;
  }

  private line(raw: string): void {
    const line = raw.trim();
    if (line === '') return;
    if (line.startsWith('#')) {
      // `# HELP name ...` and `# TYPE name kind` declare a family; other comments say nothing.
      const m = /^#\s+(?:HELP|TYPE)\s+(\S+)/.exec(line);
      if (m && this.wanted.has(m[1]!) && !this.families.has(m[1]!)) this.families.set(m[1]!, []);
      return;
    }
    const name = NAME.exec(line)?.[0];
    if (name === undefined || !this.wanted.has(name)) return;
    const parsed = parseSampleLine(line, this.maxLabelChars);
    if (!parsed) return;
    let samples = this.families.get(name);
    if (!samples) this.families.set(name, (samples = []));
    if (samples.length < this.maxSamples) samples.push(parsed.sample);
  }
}

/** The `wanted` families of a whole text. */
export function parseExposition(text: string, wanted: ReadonlySet<string>, limits?: ExpositionLimits): Exposition {
  const reader = new ExpositionReader(wanted, limits);
  reader.write(text);
  return reader.end();
}
