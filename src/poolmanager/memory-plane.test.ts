/** The contract suite on the in-memory plane: the suite's own check, and the manager tests' plane kept honest. */
import { runControlPlaneContract } from './control-plane.contract.js';
import { MemoryPlane } from './memory-plane.js';

runControlPlaneContract('memory', () => new MemoryPlane(), { live: false, startMs: 1000 });
