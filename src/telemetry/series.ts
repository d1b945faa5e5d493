/**
 * Labelled series that cost a call almost nothing. prom-client hashes and
 * validates the label set on every inc() and observe(), a microsecond or
 * two each, and a call moves a dozen series. Here a caller looks its cell
 * up once (per fn version, say), keeps it, and then adds to plain numbers;
 * the work of exposition happens at scrape time.
 *
 * Each class is a metric prom-client's Registry can hold (name, help, type,
 * get()), so the text format, content type and default metrics stay
 * prom-client's.
 */
type Labels = Record<string, string | number>;

/** A metric's values as prom-client's Registry formats them. */
interface Exposition {
  readonly name: string;
  readonly help: string;
  readonly type: string;
  readonly aggregator: 'sum';
  readonly values: Array<{ value: number; labels: Labels; metricName?: string }>;
}

/** One label set's value of a counter or gauge. */
export interface Cell {
  value: number;
}

/** One label set's histogram: counts per bucket (not cumulative), sum and count. */
export interface HistogramCell {
  readonly counts: Float64Array;
  sum: number;
  count: number;
}

abstract class Series<C> {
  protected readonly cells = new Map<string, { labels: Labels; cell: C }>();
  readonly aggregator = 'sum' as const;

  constructor(
    readonly name: string,
    readonly help: string,
    readonly labelNames: readonly string[],
  ) {}

  abstract readonly type: string;
  protected abstract make(): C;

  /** The cell of these label values (in labelNames order), made on first use. */
  cell(...values: string[]): C {
    const key = values.join('\u0000');
    let entry = this.cells.get(key);
    if (!entry) {
      const labels: Labels = {};
      this.labelNames.forEach((n, i) => (labels[n] = values[i] ?? ''));
      entry = { labels, cell: this.make() };
      this.cells.set(key, entry);
    }
    return entry.cell;
  }

  /** Forgets the cells whose label `name` is `value` (a deleted fn's series). */
  drop(name: string, value: string): void {
    for (const [key, entry] of this.cells) if (entry.labels[name] === value) this.cells.delete(key);
  }
}

/** A counter (type counter) or gauge over cells. */
export class CellMetric extends Series<Cell> {
  constructor(
    readonly type: 'counter' | 'gauge',
    name: string,
    help: string,
    labelNames: readonly string[],
  ) {
    super(name, help, labelNames);
  }

  protected make(): Cell {
    return { value: 0 };
  }

  async get(): Promise<Exposition> {
    const values: Exposition['values'] = [];
    for (const { labels, cell } of this.cells.values()) values.push({ value: cell.value, labels });
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }
}

/** A histogram over cells, with fixed upper bounds. */
export class CellHistogram extends Series<HistogramCell> {
  readonly type = 'histogram';

  constructor(
    name: string,
    help: string,
    labelNames: readonly string[],
    readonly bounds: readonly number[],
  ) {
    super(name, help, labelNames);
  }

  protected make(): HistogramCell {
    return { counts: new Float64Array(this.bounds.length), sum: 0, count: 0 };
  }

  /** Adds one observation to `cell`. */
  observe(cell: HistogramCell, v: number): void {
    cell.sum += v;
    cell.count++;
    const b = this.bounds;
    for (let i = 0; i < b.length; i++) {
      if (v <= b[i]!) {
        cell.counts[i]!++;
        return;
      }
    }
  }

  async get(): Promise<Exposition> {
    const values: Exposition['values'] = [];
    for (const { labels, cell } of this.cells.values()) {
      let acc = 0;
      this.bounds.forEach((le, i) => {
        acc += cell.counts[i]!;
        values.push({ metricName: `${this.name}_bucket`, labels: { ...labels, le }, value: acc });
      });
      values.push({ metricName: `${this.name}_bucket`, labels: { ...labels, le: '+Inf' }, value: cell.count });
      values.push({ metricName: `${this.name}_sum`, labels, value: cell.sum });
      values.push({ metricName: `${this.name}_count`, labels, value: cell.count });
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }
}
