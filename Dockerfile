# neuron-torch: one cell of the release as a container image (TorchNeuron venv, Neuron runtime, smoke tests).
# Build it with `neuron-torch build image --cell ID`: every ARG below comes from constraints/matrix.toml
# (`--dry-run` prints them) and the cell's hash lock; a bare `docker build` fails on purpose.
# Stages: keyring (verified apt key) -> python (the cell's interpreter, from its route's stage: python-distro or
# python-uv-standalone) -> venv (hash-locked pip install) -> runtime (non-root, no toolchain, no caches). The smoke
# tests are copied last so editing them rebuilds one layer.
# A CA bundle for TLS-intercepting proxies is only ever a build secret (`--secret id=ca,src=FILE`), never a layer.

ARG BASE_IMAGE=missing-build-arg-base-image
# The cell's Python route, which names the python-<route> stage the build uses: distro or uv-standalone.
ARG PYTHON_ROUTE=missing-build-arg-python-route

FROM ${BASE_IMAGE} AS os
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive
# Install Debian/Ubuntu packages only when missing; a CA secret, when given, is trusted by apt in this RUN only.
COPY images/docker/apt-install.sh /usr/local/lib/neuron-torch/apt-install.sh

# The Neuron apt key, fetched and verified here so gnupg and curl stay out of the runtime stage. aptkey.sh is the one
# fingerprint check (the neuron_repo role and `neuron-torch bundle` run the same file). The tools are one stage and
# the key another: `build image` sets APT_KEY_CHECKED_AT to the time of the build, so the key is fetched and checked
# on every build (about a second) and a cached keyring never outlives a rotated or re-signed key; the stages after it
# stay cached while the keyring's bytes are the same.
FROM os AS keyring-tools
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN --mount=type=secret,id=ca \
    /usr/local/lib/neuron-torch/apt-install.sh curl gnupg ca-certificates

FROM keyring-tools AS keyring
ARG APT_KEY_URL
ARG APT_KEY_FINGERPRINT=""
ARG APT_KEY_CHECKED_AT=missing-build-arg-apt-key-checked-at
COPY src/neuron_torch/aptkey.sh /usr/local/lib/neuron-torch/aptkey.sh
RUN --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export CURL_CA_BUNDLE=/run/secrets/ca; fi \
    && echo "fetching the apt key at ${APT_KEY_CHECKED_AT}" \
    && curl -fsSL "$APT_KEY_URL" -o /tmp/key.asc \
    && /usr/local/lib/neuron-torch/aptkey.sh --expect "$APT_KEY_FINGERPRINT" --source "$APT_KEY_URL" \
         --keyring /neuron.gpg /tmp/key.asc

# The cell's Python, one stage per route (PYTHON_ROUTE, the cell record's python_route); BuildKit builds only the
# stage the route names. Each stage links the interpreter as /usr/local/bin/neuron-torch-python.
# Route "distro": the OS's own python3.X and python3.X-venv.
FROM os AS python-distro
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG PYTHON
RUN --mount=type=secret,id=ca \
    /usr/local/lib/neuron-torch/apt-install.sh "python${PYTHON}" "python${PYTHON}-venv" \
    && ln -s "/usr/bin/python${PYTHON}" /usr/local/bin/neuron-torch-python

# Route "uv-standalone": a standalone CPython (python-build-standalone) installed under /opt/neuron-torch/python by a
# pinned, hash-checked uv. uv reads where interpreters come from out of UV_PYTHON_DOWNLOADS_JSON_URL /
# UV_PYTHON_INSTALL_MIRROR (mirror settings); empty means its built-in list.
FROM os AS python-uv-standalone
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG PYTHON
ARG UV_VERSION
ARG UV_SHA256
ARG UV_PYTHON_DOWNLOADS_JSON_URL=""
ARG UV_PYTHON_INSTALL_MIRROR=""
ARG PYPI_INDEX_URL
RUN --mount=type=secret,id=ca \
    /usr/local/lib/neuron-torch/apt-install.sh python3 python3-venv ca-certificates \
    && if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca SSL_CERT_FILE=/run/secrets/ca; fi \
    && python3 -m venv /tmp/uv \
    && echo "uv==${UV_VERSION} --hash=sha256:${UV_SHA256}" > /tmp/uv-lock.txt \
    && PIP_CONFIG_FILE=/dev/null /tmp/uv/bin/pip install --disable-pip-version-check --no-cache-dir \
         --require-hashes --no-deps --index-url "$PYPI_INDEX_URL" -r /tmp/uv-lock.txt \
    && export UV_PYTHON_INSTALL_DIR=/opt/neuron-torch/python \
    && if [ -z "$UV_PYTHON_DOWNLOADS_JSON_URL" ]; then unset UV_PYTHON_DOWNLOADS_JSON_URL; fi \
    && if [ -z "$UV_PYTHON_INSTALL_MIRROR" ]; then unset UV_PYTHON_INSTALL_MIRROR; fi \
    && /tmp/uv/bin/uv python install --no-cache --no-bin "$PYTHON" \
    && ln -s "$(/tmp/uv/bin/uv python find --python-preference only-managed "$PYTHON")" \
         /usr/local/bin/neuron-torch-python \
    && rm -rf /tmp/uv /tmp/uv-lock.txt

# The cell's route, whichever it is: /opt/neuron-torch/python exists (empty on the distro route: the runtime stage
# copies it) and the interpreter runs. An unknown route has no stage: BuildKit stops at this FROM, looking for an
# image named python-<route> (`neuron-torch build image` never gets that far: the matrix refuses any other route).
# hadolint takes the name for an untagged image; it is one of the stages above.
# hadolint ignore=DL3006
FROM python-${PYTHON_ROUTE} AS python
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN mkdir -p /opt/neuron-torch/python \
    && neuron-torch-python --version

# The venv, filled only from the cell's hash lock, then checked, by neuron_cell (src/neuron_cell: the code that runs
# with the cell's Python, copied whole, its digest checked against the toolkit's NEURON_CELL_SHA256 before any of it
# runs). First its lock gate, the same code `neuron-torch build image` applies: a lock for another cell, an unsealed or
# edited one, or one holding a CUDA torch, the PyPI placeholder or nvidia-* stops the build before pip. Then its one
# lock installation (the python_env role and the bundle's install.sh run it too): each index's entries from that index
# alone (INDEX_ROUTES: NAME=URL of each index, from the matrix and its mirror settings), --require-hashes --no-deps.
# Last, the pins asserted in the venv.
FROM python AS venv
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG CELL_DIR
ARG CELL_ID
ARG INDEX_ROUTES
ARG NEURON_CELL_SHA256
ARG PINS
COPY src/neuron_cell /opt/neuron-torch/lib/neuron_cell
COPY ${CELL_DIR}/lock.txt ${CELL_DIR}/gate.json /etc/neuron-torch/
RUN --mount=type=secret,id=ca --mount=type=cache,id=neuron-torch-pip,target=/root/.cache/pip \
    export PYTHONPATH=/opt/neuron-torch/lib \
    && neuron-torch-python -m neuron_cell --expect "$NEURON_CELL_SHA256" \
    && neuron-torch-python -m neuron_cell.lockgate --cell "$CELL_ID" \
      --rules /etc/neuron-torch/gate.json /etc/neuron-torch/lock.txt \
    && if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && "$(readlink -f /usr/local/bin/neuron-torch-python)" -m venv /opt/neuron-torch/venv \
    && /opt/neuron-torch/venv/bin/python -m neuron_cell.lockinstall --venv /opt/neuron-torch/venv \
         --index "$INDEX_ROUTES" /etc/neuron-torch/lock.txt \
    && /opt/neuron-torch/venv/bin/python -m neuron_cell.assertpins "$PINS"

FROM os AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG PYTHON
ARG PYTHON_ROUTE
ARG APT_URL
ARG APT_KEYRING
ARG APT_COMPONENT
ARG APT_PACKAGES
# The Neuron user-space packages (runtime, collectives, tools: scope "image"); the driver stays on the host.
COPY --from=keyring /neuron.gpg ${APT_KEYRING}
# APT_PACKAGES holds NAME=VERSION* pins: split into words with globbing off (set -f).
# hadolint ignore=SC2086
RUN --mount=type=secret,id=ca \
    . /etc/os-release \
    && echo "deb [signed-by=${APT_KEYRING}] ${APT_URL} ${VERSION_CODENAME} ${APT_COMPONENT}" \
         > /etc/apt/sources.list.d/neuron.list \
    && runtime=""; if [ "$PYTHON_ROUTE" = distro ]; then runtime="python${PYTHON}"; fi \
    && set -f && /usr/local/lib/neuron-torch/apt-install.sh $runtime $APT_PACKAGES && set +f \
    && rm /usr/local/lib/neuron-torch/apt-install.sh
# The non-root user neuron, uid/gid 1000: the base's own uid-1000 user (ubuntu on the official images) renamed, or new.
COPY images/docker/runtime-user.sh /usr/local/lib/neuron-torch/runtime-user.sh
RUN /usr/local/lib/neuron-torch/runtime-user.sh && rm /usr/local/lib/neuron-torch/runtime-user.sh
COPY --from=python /opt/neuron-torch/python /opt/neuron-torch/python
COPY --from=venv /opt/neuron-torch/venv /opt/neuron-torch/venv
COPY --from=venv /etc/neuron-torch/lock.txt /etc/neuron-torch/lock.txt
ENV PATH=/opt/neuron-torch/venv/bin:/opt/aws/neuron/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LD_LIBRARY_PATH=/opt/aws/neuron/lib \
    VIRTUAL_ENV=/opt/neuron-torch/venv \
    PYTHONDONTWRITEBYTECODE=1 \
    NEURON_TORCH_PYTHON=/opt/neuron-torch/venv/bin/python

ARG CELL_ID
ARG RELEASE
ARG FAMILY
ARG PINS
# The base as the release names it (pinned: NAME:TAG@sha256:...) and the digest the build resolved it to and checked
# (a registry's manifest digest, or a local-only image's id): neuron_torch.baseimage.
ARG BASE_REFERENCE
ARG BASE_DIGEST
LABEL org.opencontainers.image.title="neuron-torch" \
      org.opencontainers.image.description="TorchNeuron (torch-neuronx) environment, cell ${CELL_ID}" \
      org.opencontainers.image.version="${RELEASE}-${CELL_ID}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_REFERENCE}" \
      org.opencontainers.image.base.digest="${BASE_DIGEST}" \
      io.neuron-torch.cell="${CELL_ID}" \
      io.neuron-torch.release="${RELEASE}" \
      io.neuron-torch.family="${FAMILY}" \
      io.neuron-torch.python="${PYTHON}" \
      io.neuron-torch.pins="${PINS}" \
      io.neuron-torch.apt-pins="${APT_PACKAGES}"

# Changes most often, so last: the cell record, the entrypoint, verify-device, neuron_cell and the smoke tests.
ARG CELL_DIR
COPY ${CELL_DIR}/cell.json /etc/neuron-torch/cell.json
COPY images/docker/entrypoint.sh /usr/local/bin/neuron-torch-entrypoint
COPY scripts/verify-device.sh /opt/neuron-torch/scripts/verify-device.sh
RUN ln -s /opt/neuron-torch/scripts/verify-device.sh /usr/local/bin/verify-device
COPY src/neuron_cell /opt/neuron-torch/lib/neuron_cell
COPY smoke_tests /opt/neuron-torch/smoke_tests
# The bill of materials, from what is installed: CycloneDX SBOMs of the venv and of the apt packages, version-info.json
# and their SHA256SUMS in /etc/neuron-torch/bom (neuron_cell.sbom, the generator the Packer builds run too).
# `neuron-torch build image` then labels the image io.neuron-torch.bom with the sha256 of SHA256SUMS.
RUN PYTHONPATH=/opt/neuron-torch/lib /opt/neuron-torch/venv/bin/python -m neuron_cell.sbom --out /etc/neuron-torch/bom \
      --base-image "$BASE_REFERENCE" --base-digest "$BASE_DIGEST"
# The commit built from (`neuron-torch build image` passes the full sha, `-dirty` for an edited checkout): declared
# last, so a new commit changes this label and no layer.
ARG REVISION
LABEL org.opencontainers.image.revision="${REVISION}"
USER 1000:1000
WORKDIR /home/neuron
ENTRYPOINT ["/usr/local/bin/neuron-torch-entrypoint"]
CMD []
