# syntax=docker/dockerfile:1
#
# The fnts image, for operators where a registry is reachable:
#
#   docker build -t fnts/fnts .
#
# One image serves every role (FN_NODE_TYPE); the pool manager starts its
# runners from it. `npm run image:runner` builds the same image offline,
# from this machine's own node (what the test suite uses); this file is the
# ordinary way, from the official Node image.

ARG NODE_VERSION=20

# ---- build: dependencies (SQLite's binding compiles here), then the TypeScript
FROM node:${NODE_VERSION}-bookworm-slim AS build
RUN apt-get update \
  && apt-get install -y --no-install-recommends python3 make g++ \
  && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY proto ./proto
COPY src ./src
COPY scripts ./scripts
COPY ui ./ui
RUN npm run build && npm prune --omit=dev

# ---- run: node, the compiled server and its production dependencies
FROM node:${NODE_VERSION}-bookworm-slim
# mount/umount (util-linux, already in the image) make each function's socket
# folder a small tmpfs when the server runs as root beside the engine
# (FN_IOFS_TMPFS); the engine is reached through its socket, mounted by the operator.
WORKDIR /app
ENV NODE_ENV=production FN_LOG_FORMAT=json
COPY --from=build /src/package.json ./
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist ./dist
COPY --from=build /src/proto ./proto
EXPOSE 8080 9190 9191
LABEL org.opencontainers.image.title=fnts \
      org.opencontainers.image.description="A container-native serverless platform, compatible with the Fn Project"
ENTRYPOINT ["node", "/app/dist/cli/main.js"]
CMD ["serve"]
