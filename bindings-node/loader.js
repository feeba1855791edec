'use strict'
// Finds the native addon: a source build in this folder
// (`dsh-native.<platform>.node`, from `npm run build`), else the prebuilt
// platform package (`dsh-native-linux-x64-gnu`, an optional dependency of
// the published package). Anything else is one Error that says what this
// machine is, what is supported and how to build from source.

const { existsSync } = require('node:fs')
const { join } = require('node:path')

/** Prebuilt platform packages, keyed by napi-rs's platform name. */
const PREBUILT = {
  'linux-x64-gnu': 'dsh-native-linux-x64-gnu',
}
const SUPPORTED = 'linux-x64-gnu (x86_64 Linux, glibc 2.17 or newer)'
const BUILD_HINT =
  'build it from source (Rust 1.88 or newer): cd bindings-node && npm ci && npm run build'

/** 'glibc', 'musl', or null off Linux. */
function libc() {
  if (process.platform !== 'linux') return null
  try {
    const report = process.report?.getReport?.()
    const header = typeof report === 'string' ? JSON.parse(report).header : report?.header
    if (header?.glibcVersionRuntime) return 'glibc'
  } catch {
    // fall through: no report, assume no glibc
  }
  return 'musl'
}

/** napi-rs's platform name: linux-x64-gnu, linux-arm64-musl, darwin-arm64, … */
function platformName(platform, arch, libcName) {
  if (platform !== 'linux') return `${platform}-${arch}`
  return `${platform}-${arch}-${libcName === 'glibc' ? 'gnu' : 'musl'}`
}

function loadError(message, fields, cause) {
  const err = new Error(message, cause === undefined ? undefined : { cause })
  err.code = 'DSH_NATIVE_BINARY'
  Object.assign(err, fields)
  return err
}

function load() {
  const { platform, arch } = process
  const libcName = libc()
  const name = platformName(platform, arch, libcName)
  const machine = `platform=${platform} arch=${arch} libc=${libcName ?? 'n/a'}`
  const fields = { platform, arch, libc: libcName }

  const local = join(__dirname, `dsh-native.${name}.node`)
  if (existsSync(local)) {
    try {
      return require(local)
    } catch (cause) {
      throw loadError(
        `dsh-native: the source-built addon ${local} did not load on this machine (${machine}): ${cause.message}. To rebuild it, ${BUILD_HINT}`,
        fields,
        cause,
      )
    }
  }

  const pkg = PREBUILT[name]
  if (pkg === undefined) {
    throw loadError(
      `dsh-native has no prebuilt binary for this machine (${machine}); prebuilt: ${SUPPORTED}. To ${BUILD_HINT}`,
      fields,
    )
  }
  let entry
  try {
    entry = require.resolve(pkg)
  } catch {
    throw loadError(
      `dsh-native: no native addon for this machine (${machine}): neither a source build ` +
        `(${local}) nor the prebuilt package ${pkg} is installed (npm installs it as an optional ` +
        `dependency of dsh-native; --omit=optional skips it). Install ${pkg} at dsh-native's ` +
        `version, or ${BUILD_HINT}`,
      fields,
    )
  }
  const version = require('./package.json').version
  const found = require(`${pkg}/package.json`).version
  if (found !== version) {
    throw loadError(
      `dsh-native ${version} needs ${pkg} at the same version, found ${found}: install ${pkg}@${version}`,
      fields,
    )
  }
  try {
    return require(entry)
  } catch (cause) {
    throw loadError(
      `dsh-native: the prebuilt addon ${entry} did not load on this machine (${machine}; prebuilt: ${SUPPORTED}): ${cause.message}. Or ${BUILD_HINT}`,
      fields,
      cause,
    )
  }
}

module.exports = load()
