import { describe, expect, it } from 'vitest';
import { imageRefProblem, InvalidImageRef, parseImageRef } from './image.js';

const DIGEST = `sha256:${'a'.repeat(64)}`;

describe('parseImageRef', () => {
  it.each([
    ['hello', { registry: '', repository: 'library/hello', tag: 'latest', digest: '' }],
    ['fnproject/hello:0.0.1', { registry: '', repository: 'fnproject/hello', tag: '0.0.1', digest: '' }],
    ['registry.example.com/team/fn:2', { registry: 'registry.example.com', repository: 'team/fn', tag: '2', digest: '' }],
    ['localhost:5000/fn', { registry: 'localhost:5000', repository: 'fn', tag: 'latest', digest: '' }],
    ['localhost/fn:1', { registry: 'localhost', repository: 'fn', tag: '1', digest: '' }],
    ['my.registry:443/a/b/c:dev', { registry: 'my.registry:443', repository: 'a/b/c', tag: 'dev', digest: '' }],
    [`fnproject/hello@${DIGEST}`, { registry: '', repository: 'fnproject/hello', tag: '', digest: DIGEST }],
    [`fnproject/hello:1@${DIGEST}`, { registry: '', repository: 'fnproject/hello', tag: '1', digest: DIGEST }],
    ['team/fn', { registry: '', repository: 'team/fn', tag: 'latest', digest: '' }],
    ['127.0.0.1:1/nothing/here:2', { registry: '127.0.0.1:1', repository: 'nothing/here', tag: '2', digest: '' }],
    ['[::1]:5000/fn', { registry: '[::1]:5000', repository: 'fn', tag: 'latest', digest: '' }],
    ['a_b__c-d--e/f.g:V1.0_x-y', { registry: '', repository: 'a_b__c-d--e/f.g', tag: 'V1.0_x-y', digest: '' }],
  ])('reads %s', (ref, expected) => {
    expect(parseImageRef(ref)).toEqual(expected);
  });

  it.each([
    ['/', /empty/],
    ['', /empty/],
    ['a//b', /empty/],
    ['a/', /empty/],
    [' hello', /lower-case/],
    ['hello ', /lower-case/],
    ['Hello', /lower-case/],
    ['../etc', /registry "\.\."/],
    ['x/../etc', /component "\.\."/],
    ['./x', /"\."/],
    ['a/./b', /"\."/],
    ['a:b:c', /tag "b:c"|lower-case/],
    ['hello:', /tag ""/],
    ['hello:-x', /tag "-x"/],
    [`hello:${'t'.repeat(129)}`, /tag/],
    ['hello@sha256:abc', /digest/],
    ['hello@', /digest/],
    [`${'a'.repeat(256)}`, /longer than 255/],
    ['bad_host.com:x/fn', /registry/],
    ['a?b', /lower-case/],
    ['a#b', /lower-case/],
    ['a%2fb', /lower-case/],
    ['a\u0000b', /lower-case/],
  ])('refuses %j, saying why', (ref, reason) => {
    expect(() => parseImageRef(ref)).toThrow(InvalidImageRef);
    expect(imageRefProblem(ref)).toMatch(reason);
  });
});
