//! `http-request`: its linkage, fuel cost, errors and the WIT records' conversions.

use wasmtime::component::LinkerInstance;

use super::{HttpCapability, HttpRequest, HttpResponse};
use crate::bindings::{HttpError, HttpHeader, IncomingResponse, OutgoingRequest};
use crate::capability::CapError;
use crate::fuel_costs::FuelCost;
use crate::host::{Cx, HostFunctions, charge, charge_bytes, check_trace, guest_result};
use crate::state::TaskState;

/// `http-request`: bytes sent (URL, headers, body) and received (headers, body).
pub const HTTP_REQUEST: FuelCost = FuelCost::new(200_000, 2);
/// This capability's entries of the fuel table.
pub const FUEL: &[(&str, FuelCost)] = &[("http-request", HTTP_REQUEST)];

/// This capability's host functions (its `Capability::HOST`).
pub(crate) const HOST: HostFunctions = HostFunctions {
    interface: crate::bindings::HOST_IMPORT,
    link,
    fuel: FUEL,
};

fn link(host: &mut LinkerInstance<'_, TaskState>) -> wasmtime::Result<()> {
    host.func_wrap(
        "http-request",
        |mut cx: Cx<'_>, (request,): (OutgoingRequest,)| {
            charge(&mut cx, HTTP_REQUEST, request_bytes(&request))?;
            let result = cx
                .data()
                .caps()
                .call(|h: &mut HttpCapability, rec| h.request(to_cap_request(request), rec));
            // The deadline passed while the host waited: end the task as the epoch would have.
            if matches!(result, Err(CapError::DeadlineExceeded)) {
                check_trace(&cx)?;
                return Err(wasmtime::Trap::Interrupt.into());
            }
            // Cancelled mid-exchange: end the task as the epoch check would have.
            if matches!(result, Err(CapError::Cancelled)) {
                return Err(crate::cancel::Cancelled.into());
            }
            let result = guest_result(&mut cx, result, http_error)?.map(from_cap_response);
            if let Ok(response) = &result {
                charge_bytes(&mut cx, HTTP_REQUEST, response_bytes(response))?;
            }
            Ok((result,))
        },
    )
}

/// A capability error as `http-error`.
fn http_error(err: CapError) -> HttpError {
    match err {
        CapError::Denied(msg) | CapError::QuotaExceeded(msg) => HttpError::Denied(msg),
        CapError::Invalid(msg) => HttpError::InvalidRequest(msg),
        // Nothing was sent; the message says who rejected it and why.
        CapError::Rejected(msg) => HttpError::Rejected(msg),
        other => HttpError::Failed(other.to_string()),
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

fn to_cap_request(r: OutgoingRequest) -> HttpRequest {
    HttpRequest {
        method: r.method,
        url: r.url,
        headers: r.headers.into_iter().map(|h| (h.name, h.value)).collect(),
        body: r.body,
    }
}

fn from_cap_response(r: HttpResponse) -> IncomingResponse {
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
