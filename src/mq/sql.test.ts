import { openSqlite } from '../datastore/index.js';
import { runQueueContract } from './queue.contract.js';
import { SqlQueue } from './sql.js';

runQueueContract('sqlite', async (now) => {
  const ds = await openSqlite(':memory:');
  return { queue: new SqlQueue(() => ds.database(), now), close: () => ds.close() };
});
