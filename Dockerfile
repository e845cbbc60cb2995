# kiln as a SageMaker bring-your-own-container image (docs/sagemaker.md).
#
#   docker build -t kiln-sagemaker .                         # CPU serving
#   docker build -t kiln-sagemaker --build-arg KILN_CUDA=ON . # + the CUDA backend (see below)
#
# SageMaker runs the image as `docker run IMAGE serve`, extracts ModelDataUrl (a `kiln package`
# model.tar.gz, or a `kiln push` prefix with CompressionType None) into /opt/ml/model, and expects
# /ping and /invocations on port 8080: `kiln serve` with no artifact does exactly that.
# Not built in CI (no Docker engine there); see docs/sagemaker.md.

ARG DEBIAN_IMAGE=debian:12-slim

# ---- build: the project's own dependency and build scripts, the kiln binary only ---------------
FROM ${DEBIAN_IMAGE} AS build
ARG KILN_CUDA=OFF
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only what a runtime build reads (build directories and venvs of a checkout stay out).
COPY CMakeLists.txt .clang-format /src/
COPY cmake /src/cmake
COPY scripts /src/scripts
COPY schema /src/schema
COPY runtime /src/runtime
COPY kernels /src/kernels
COPY tools /src/tools
COPY compiler /src/compiler
# A CUDA build needs NVIDIA's toolkit for Debian 12 (cuda-toolkit from NVIDIA's apt repository);
# the driver itself is not needed to build: libcuda is loaded at run time.
RUN scripts/install-deps.sh \
    && if [ "$KILN_CUDA" = "ON" ] && [ ! -d /usr/local/cuda ]; then \
         echo "KILN_CUDA=ON needs the CUDA toolkit in the build stage (/usr/local/cuda)"; exit 1; \
       fi
# The serving image needs the runtime only: no compiler (MLIR), no tests.
RUN rm -rf build-image && KILN_BUILD_DIR=/src/build-image KILN_BUILD_TARGETS=kiln \
    scripts/build.sh -DKILN_BUILD_COMPILER=OFF -DKILN_BUILD_TESTS=OFF -DKILN_ENABLE_CUDA=${KILN_CUDA}
# Every shared library kiln links, except glibc's own (the runtime stage has the same Debian 12).
RUN mkdir -p /out/bin /out/lib \
    && cp build-image/tools/kiln/kiln /out/bin/kiln \
    && ldd /out/bin/kiln | awk '/=> \// { print $3 }' \
       | grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*)\.so' \
       | xargs -r -I{} cp -L {} /out/lib/ \
    && /out/bin/kiln --version

# ---- runtime: the binary, its libraries, CA certificates for S3 over https ----------------------
FROM ${DEBIAN_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/lib/ /usr/local/lib/kiln/
COPY --from=build /out/bin/kiln /usr/local/bin/kiln
RUN echo /usr/local/lib/kiln > /etc/ld.so.conf.d/kiln.conf && ldconfig \
    && kiln --version && mkdir -p /opt/ml/model
# kiln serve s3://... keeps pulled artifacts here (keyed by the manifest's sha256).
ENV KILN_CACHE_DIR=/var/cache/kiln
EXPOSE 8080
# `serve` (SageMaker's argument) -> `kiln serve`: /opt/ml/model on 0.0.0.0:8080, SageMaker mode.
# Other commands work too: `docker run IMAGE verify /opt/ml/model --golden g.json`.
ENTRYPOINT ["/usr/local/bin/kiln"]
CMD ["serve"]
