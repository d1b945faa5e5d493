/**
 * Image references, by Docker's reference grammar (distribution/reference),
 * checked wherever a reference enters fnts: a fn created or updated through
 * the API, a call arriving from an LB (TryCall) or from the queue, and the
 * driver before it asks the engine anything. A name the engine cannot
 * resolve is refused there, in words, instead of reaching the engine's API
 * as a path it redirects or rejects.
 *
 *   reference  := name [ ":" tag ] [ "@" digest ]
 *   name       := [ domain "/" ] path-component ( "/" path-component )*
 *   domain     := host [ ":" port ]      (first component with "." or ":", or "localhost")
 *   path-component := [a-z0-9]+ ( separator [a-z0-9]+ )*     separator := "." | "_" | "__" | "-"+
 *   tag        := [\w][\w.-]{0,127}
 *   digest     := algorithm ":" hex{32,}  algorithm := [A-Za-z][A-Za-z0-9]* ( [+._-] [A-Za-z][A-Za-z0-9]* )*
 *
 * The name (domain and path) is at most 255 characters.
 */

export interface ImageRef {
  /** '' for Docker Hub. */
  readonly registry: string;
  /** e.g. library/node, fnproject/hello, team/sub/fn */
  readonly repository: string;
  /** 'latest' when none was given; '' when a digest pins the image. */
  readonly tag: string;
  readonly digest: string;
}

const MAX_NAME_LENGTH = 255;
const PATH_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const DOMAIN_COMPONENT = '(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])';
const DOMAIN = new RegExp(`^(?:${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*|\\[[0-9a-fA-F:.]+\\])(?::[0-9]+)?$`);
const TAG = /^\w[\w.-]{0,127}$/;
const DIGEST = /^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$/;

/** A reference that is not one; `reason` says what is wrong, for the user. */
export class InvalidImageRef extends Error {
  override readonly name = 'InvalidImageRef';
  constructor(
    readonly ref: string,
    readonly reason: string,
  ) {
    super(`${JSON.stringify(ref)} is not an image reference: ${reason}`);
  }
}

/**
 * Parses `ref` as Docker does: the first component is a registry when it
 * has a '.' or a ':' or is 'localhost'; single-component Hub images live in
 * 'library/'; no tag means 'latest'. Throws InvalidImageRef when `ref` does
 * not follow the grammar (surrounding spaces included: Docker refuses them).
 */
export function parseImageRef(ref: string): ImageRef {
  const fail = (reason: string): never => {
    throw new InvalidImageRef(ref, reason);
  };
  if (ref === '') fail('it is empty');
  let rest = ref;
  let digest = '';
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest)) fail(`the digest ${JSON.stringify(digest)} is not algorithm:hex (e.g. sha256: and 64 hex digits)`);
  }
  let tag = '';
  const colon = rest.lastIndexOf(':');
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) fail(`the tag ${JSON.stringify(tag)} must be 1 to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'`);
  }
  if (rest.length > MAX_NAME_LENGTH) fail(`the name is longer than ${MAX_NAME_LENGTH} characters`);
  const parts = rest.split('/');
  let registry = '';
  const first = parts[0]!;
  if (parts.length > 1 && (first.includes('.') || first.includes(':') || first === 'localhost')) {
    if (!DOMAIN.test(first)) fail(`the registry ${JSON.stringify(first)} is not a host name with an optional port`);
    registry = first;
    parts.shift();
  }
  for (const part of parts) {
    if (!PATH_COMPONENT.test(part)) {
      fail(
        part === ''
          ? 'a name component is empty (a leading, trailing or doubled "/")'
          : `the name component ${JSON.stringify(part)} must be lower-case letters and digits, separated by '.', '_', '__' or '-'`,
      );
    }
  }
  const repository = registry === '' && parts.length === 1 ? `library/${parts[0]!}` : parts.join('/');
  if (tag === '' && digest === '') tag = 'latest';
  return { registry, repository, tag, digest };
}

/** Why `ref` is not an image reference, or undefined when it is one. */
export function imageRefProblem(ref: string): string | undefined {
  try {
    parseImageRef(ref);
    return undefined;
  } catch (err) {
    if (err instanceof InvalidImageRef) return err.reason;
    throw err;
  }
}
