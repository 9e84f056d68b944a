//! The `ainur:ari/host@2.0.0` imports, registered by hand so each call can charge fuel on the
//! `Store` before delegating to the task's capabilities.
//!
//! Capability errors become the WIT's typed errors for the guest, never a trap. The only traps raised
//! here are fuel exhaustion (a host call the budget cannot pay for) and a trace over its
//! ceiling (`trace::MAX_TRACE_BYTES`).

use wasmtime::StoreContextMut;
use wasmtime::component::Linker;

use crate::bindings::{
    ErrorCode, HOST_IMPORT, HashAlgorithm, HttpError, HttpHeader, IncomingResponse, LogLevel,
    OutgoingRequest, StorageError,
};
use crate::capability::{self, CapError};
use crate::fuel_costs::{self, FuelCost};
use crate::state::TaskState;
use crate::trace::{MAX_TRACE_BYTES, TraceLimitHit};

pub(crate) type Cx<'a> = StoreContextMut<'a, TaskState>;

/// Adds the host interface to `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<TaskState>) -> wasmtime::Result<()> {
    let mut host = linker.instance(HOST_IMPORT)?;

    host.func_wrap(
        "log",
        |mut cx: Cx<'_>, (level, message): (LogLevel, String)| {
            charge(&mut cx, fuel_costs::LOG, message.len())?;
            cx.data().caps().log(log_level(level), &message);
            Ok(())
        },
    )?;

    host.func_wrap("storage-get", |mut cx: Cx<'_>, (key,): (String,)| {
        charge(&mut cx, fuel_costs::STORAGE_GET, key.len())?;
        let result = cx.data().caps().storage_get(&key);
        let result = guest_result(&mut cx, result, storage_error)?;
        if let Ok(Some(value)) = &result {
            charge_bytes(&mut cx, fuel_costs::STORAGE_GET, value.len())?;
        }
        Ok((result,))
    })?;

    host.func_wrap(
        "storage-set",
        |mut cx: Cx<'_>, (key, value): (String, Vec<u8>)| {
            charge(&mut cx, fuel_costs::STORAGE_SET, key.len() + value.len())?;
            let result = cx.data().caps().storage_set(&key, &value);
            Ok((guest_result(&mut cx, result, storage_error)?,))
        },
    )?;

    host.func_wrap("storage-delete", |mut cx: Cx<'_>, (key,): (String,)| {
        charge(&mut cx, fuel_costs::STORAGE_DELETE, key.len())?;
        let result = cx.data().caps().storage_delete(&key);
        Ok((guest_result(&mut cx, result, storage_error)?,))
    })?;

    host.func_wrap("random-bytes", |mut cx: Cx<'_>, (len,): (u32,)| {
        charge(&mut cx, fuel_costs::RANDOM_BYTES, len as usize)?;
        let result = cx.data().caps().random_bytes(len);
        Ok((guest_result(&mut cx, result, error_code)?,))
    })?;

    host.func_wrap(
        "hash",
        |mut cx: Cx<'_>, (algorithm, data): (HashAlgorithm, Vec<u8>)| {
            charge(&mut cx, fuel_costs::HASH, data.len())?;
            Ok((cx.data().caps().hash(hash_algorithm(algorithm), &data),))
        },
    )?;

    host.func_wrap("sign", |mut cx: Cx<'_>, (data,): (Vec<u8>,)| {
        charge(&mut cx, fuel_costs::SIGN, data.len())?;
        let result = cx.data().caps().sign(&data);
        Ok((guest_result(&mut cx, result, error_code)?,))
    })?;

    host.func_wrap(
        "verify",
        |mut cx: Cx<'_>, (public_key, data, signature): (Vec<u8>, Vec<u8>, Vec<u8>)| {
            charge(&mut cx, fuel_costs::VERIFY, data.len())?;
            Ok((cx.data().caps().verify(&public_key, &data, &signature),))
        },
    )?;

    host.func_wrap(
        "http-request",
        |mut cx: Cx<'_>, (request,): (OutgoingRequest,)| {
            charge(&mut cx, fuel_costs::HTTP_REQUEST, request_bytes(&request))?;
            let result = cx.data().caps().http_request(to_cap_request(request));
            // The deadline passed while the host waited: end the task as the epoch would have.
            if matches!(result, Err(CapError::DeadlineExceeded)) {
                check_trace(&cx)?;
                return Err(wasmtime::Trap::Interrupt.into());
            }
            let result = guest_result(&mut cx, result, http_error)?.map(from_cap_response);
            if let Ok(response) = &result {
                charge_bytes(&mut cx, fuel_costs::HTTP_REQUEST, response_bytes(response))?;
            }
            Ok((result,))
        },
    )?;

    host.func_wrap("now", |mut cx: Cx<'_>, (): ()| {
        charge(&mut cx, fuel_costs::NOW, 0)?;
        let result = cx.data().caps().now();
        Ok((guest_result(&mut cx, result, error_code)?,))
    })?;

    Ok(())
}

/// Charges `cost` for a call moving `bytes`; traps with `OutOfFuel` when the budget cannot pay.
pub(crate) fn charge(cx: &mut Cx<'_>, cost: FuelCost, bytes: usize) -> wasmtime::Result<()> {
    take_fuel(cx, cost.charge(bytes))
}

/// Charges only the per-byte part (for data that arrives after the call was paid for).
fn charge_bytes(cx: &mut Cx<'_>, cost: FuelCost, bytes: usize) -> wasmtime::Result<()> {
    take_fuel(cx, FuelCost::new(0, cost.per_byte).charge(bytes))
}

fn take_fuel(cx: &mut Cx<'_>, fuel: u64) -> wasmtime::Result<()> {
    // `get_fuel` fails only when the engine does not meter fuel (the fuel-off benchmark).
    let Ok(left) = cx.get_fuel() else {
        return Ok(());
    };
    if fuel > left {
        cx.set_fuel(0)?;
        cx.data_mut().host_fuel += left;
        return Err(wasmtime::Trap::OutOfFuel.into());
    }
    cx.set_fuel(left - fuel)?;
    cx.data_mut().host_fuel += fuel;
    Ok(())
}

/// Traps when the call overflowed the task's trace, before the guest sees its result.
pub(crate) fn check_trace(cx: &Cx<'_>) -> wasmtime::Result<()> {
    if cx.data().caps().trace_overflowed() {
        return Err(TraceLimitHit(MAX_TRACE_BYTES).into());
    }
    Ok(())
}

/// Maps a capability result to what the guest sees (`to_guest` picks the WIT error type),
/// remembering host failures for classification (denials are remembered by the capabilities
/// themselves).
fn guest_result<T, E>(
    cx: &mut Cx<'_>,
    result: Result<T, CapError>,
    to_guest: fn(CapError) -> E,
) -> wasmtime::Result<Result<T, E>> {
    check_trace(cx)?;
    Ok(result.map_err(|err| {
        if matches!(
            err,
            CapError::Failed(_) | CapError::Conflict(_) | CapError::DeadlineExceeded
        ) {
            remember_failure(cx, err.to_string());
        }
        to_guest(err)
    }))
}

/// Keeps a host failure for classification.
fn remember_failure(cx: &mut Cx<'_>, msg: String) {
    // Bounded: a guest looping on a failing call must not grow host memory.
    let failures = &mut cx.data_mut().host_failures;
    if failures.len() < capability::MAX_NOTED {
        failures.push(msg);
    }
}

/// A capability error as `error-code`, the type of every call without an error type of its own.
fn error_code(err: CapError) -> ErrorCode {
    match err {
        CapError::Denied(msg) | CapError::QuotaExceeded(msg) => ErrorCode::Denied(msg),
        CapError::Invalid(msg) => ErrorCode::InvalidInput(msg),
        other => ErrorCode::Failed(other.to_string()),
    }
}

/// A capability error as `storage-error`. A conflict is `failed` to the guest: the runtime
/// runs the task again anyway.
fn storage_error(err: CapError) -> StorageError {
    match err {
        CapError::Denied(msg) => StorageError::Denied(msg),
        CapError::QuotaExceeded(msg) => StorageError::QuotaExceeded(msg),
        CapError::Invalid(msg) => StorageError::InvalidKey(msg),
        other => StorageError::Failed(other.to_string()),
    }
}

/// A capability error as `http-error`.
fn http_error(err: CapError) -> HttpError {
    match err {
        CapError::Denied(msg) | CapError::QuotaExceeded(msg) => HttpError::Denied(msg),
        CapError::Invalid(msg) => HttpError::InvalidRequest(msg),
        other => HttpError::Failed(other.to_string()),
    }
}

fn hash_algorithm(algorithm: HashAlgorithm) -> capability::HashAlgorithm {
    match algorithm {
        HashAlgorithm::Sha256 => capability::HashAlgorithm::Sha256,
        HashAlgorithm::Sha384 => capability::HashAlgorithm::Sha384,
        HashAlgorithm::Sha512 => capability::HashAlgorithm::Sha512,
    }
}

fn log_level(level: LogLevel) -> capability::LogLevel {
    match level {
        LogLevel::Trace => capability::LogLevel::Trace,
        LogLevel::Debug => capability::LogLevel::Debug,
        LogLevel::Info => capability::LogLevel::Info,
        LogLevel::Warn => capability::LogLevel::Warn,
        LogLevel::Error => capability::LogLevel::Error,
    }
}

fn request_bytes(r: &OutgoingRequest) -> usize {
    r.method.len() + r.url.len() + headers_bytes(&r.headers) + r.body.len()
}

fn response_bytes(r: &IncomingResponse) -> usize {
    headers_bytes(&r.headers) + r.body.len()
}

fn headers_bytes(headers: &[HttpHeader]) -> usize {
    headers.iter().map(|h| h.name.len() + h.value.len()).sum()
}

fn to_cap_request(r: OutgoingRequest) -> capability::HttpRequest {
    capability::HttpRequest {
        method: r.method,
        url: r.url,
        headers: r.headers.into_iter().map(|h| (h.name, h.value)).collect(),
        body: r.body,
    }
}

fn from_cap_response(r: capability::HttpResponse) -> IncomingResponse {
    IncomingResponse {
        status: r.status,
        headers: r
            .headers
            .into_iter()
            .map(|(name, value)| HttpHeader { name, value })
            .collect(),
        body: r.body,
    }
}
