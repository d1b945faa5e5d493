import { describe, expect, it } from 'vitest';
import { parseImage } from './driver.js';

describe('parseImage', () => {
  it.each([
    ['hello', { registry: '', repository: 'library/hello', tag: 'latest', digest: '' }],
    ['fnproject/hello:0.0.1', { registry: '', repository: 'fnproject/hello', tag: '0.0.1', digest: '' }],
    ['registry.example.com/team/fn:2', { registry: 'registry.example.com', repository: 'team/fn', tag: '2', digest: '' }],
    ['localhost:5000/fn', { registry: 'localhost:5000', repository: 'fn', tag: 'latest', digest: '' }],
    ['localhost/fn:1', { registry: 'localhost', repository: 'fn', tag: '1', digest: '' }],
    ['my.registry:443/a/b/c:dev', { registry: 'my.registry:443', repository: 'a/b/c', tag: 'dev', digest: '' }],
    ['fnproject/hello@sha256:abc', { registry: '', repository: 'fnproject/hello', tag: '', digest: 'sha256:abc' }],
    ['team/fn', { registry: '', repository: 'team/fn', tag: 'latest', digest: '' }],
  ])('reads %s', (ref, expected) => {
    expect(parseImage(ref)).toEqual(expected);
  });
});
