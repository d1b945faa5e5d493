import { describe, expect, it } from 'vitest';
import { GroupCommit } from './group-commit.js';

/** A group commit whose writes are recorded; an item named 'bad' makes its group refused, 'down' fails it as a whole. */
function recorded(o: { lingerMs?: number; maxItems?: number } = {}) {
  const writes: string[][] = [];
  const group = new GroupCommit<string, string>({
    write: async (items) => {
      writes.push([...items]);
      await new Promise((r) => setTimeout(r, 5));
      if (items.includes('down')) throw new Error('down');
      if (items.includes('bad')) throw new Error('bad');
      return items.map((i) => `${i}!`);
    },
    maxItems: o.maxItems ?? 100,
    ...(o.lingerMs === undefined ? {} : { lingerMs: o.lingerMs }),
    sharedFailure: (err) => (err as Error).message === 'down',
  });
  return { group, writes };
}

describe('group commit', () => {
  it('writes what comes while a group is written as the next group, each caller answered with its own result', async () => {
    const { group, writes } = recorded();
    const first = group.submit('a');
    await Promise.resolve();
    const rest = ['b', 'c', 'd'].map((i) => group.submit(i));
    expect(await Promise.all([first, ...rest])).toEqual(['a!', 'b!', 'c!', 'd!']);
    expect(writes).toEqual([['a'], ['b', 'c', 'd']]);
  });

  it('keeps a group open for lingerMs: submissions spread over that time go in one write', async () => {
    const { group, writes } = recorded({ lingerMs: 30 });
    const answers: Array<Promise<string>> = [];
    for (const i of ['a', 'b', 'c']) {
      answers.push(group.submit(i));
      await new Promise((r) => setTimeout(r, 5));
    }
    expect(await Promise.all(answers)).toEqual(['a!', 'b!', 'c!']);
    expect(writes).toEqual([['a', 'b', 'c']]);
  });

  it('starts the next group when one is full', async () => {
    const { group, writes } = recorded({ lingerMs: 10, maxItems: 2 });
    await Promise.all(['a', 'b', 'c'].map((i) => group.submit(i)));
    expect(writes).toEqual([['a', 'b'], ['c']]);
  });

  it('writes a refused group again item by item, so one bad item fails no other; a failure every item would meet fails them all at once', async () => {
    const { group, writes } = recorded({ lingerMs: 10 });
    const settled = await Promise.allSettled(['a', 'bad', 'c'].map((i) => group.submit(i)));
    expect(settled.map((s) => s.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(writes).toEqual([['a', 'bad', 'c'], ['a'], ['bad'], ['c']]);
    writes.length = 0;
    const down = await Promise.allSettled(['x', 'down', 'y'].map((i) => group.submit(i)));
    expect(down.map((s) => s.status)).toEqual(['rejected', 'rejected', 'rejected']);
    expect(writes).toEqual([['x', 'down', 'y']]);
  });
});
