import { runDriverContract } from '../driver.contract.js';
import { FakeDriver, type FakeFunction } from './fake.js';

/** The contract's programs, as fake functions. */
const functions: Record<string, FakeFunction> = {
  echo: {
    main: async ({ stdin, stdout, stderr }) => {
      let n = 0;
      for await (const chunk of stdin) {
        n += (chunk as Buffer).length;
        stdout.write(chunk);
      }
      stderr.write(`${n} bytes\n`);
    },
  },
  exit: { main: () => 3 },
  oom: {
    main: ({ allocate }) => {
      for (;;) allocate(1024 * 1024);
    },
  },
  forever: { main: ({ signal }) => new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true })) },
  hello: {
    handle: (_req, body, res) => {
      const { name } = JSON.parse(body.toString()) as { name: string };
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify({ message: `Hello ${name}` }));
    },
  },
};

runDriverContract('fake', () => new FakeDriver(functions), {
  echo: { image: 'echo' },
  exit: { image: 'exit', code: 3 },
  oom: { image: 'oom' },
  forever: { image: 'forever' },
  httpStream: { image: 'hello' },
  missingImage: 'nowhere/missing',
  patienceMs: 2000,
});
