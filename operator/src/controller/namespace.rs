//! What a Run namespace needs before a worker pod can start there: the worker
//! ServiceAccount (no RBAC, token never mounted) and, with `natsCredentials`, the copy of the
//! operator's NATS credentials that worker pods mount.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};

use super::context::{Context, Error};
use super::state::RunReconcile;
use crate::names::MANAGER;
use crate::pod::nats_credentials_secret;

/// An unchanged NATS credentials copy is re-applied after this long anyway, in case someone
/// deleted or edited it.
const NATS_COPY_REFRESH: Duration = Duration::from_secs(300);

/// An apply of the worker ServiceAccount that the cache still does not show after this long
/// was undone (someone deleted the account): the next start applies it again.
const SA_REAPPLY: Duration = Duration::from_secs(30);

/// The default worker service account, created in the Run's namespace when missing. It has
/// no RBAC and its token is never mounted; it exists because pod admission requires it.
///
/// The first starts in a new namespace run at once (up to the reconciler's concurrency) and
/// all find the account missing until the cache shows it: they share one apply per namespace
/// (`Context::worker_accounts`) instead of making one each.
pub(super) async fn ensure_worker_service_account(rr: &RunReconcile<'_>) -> Result<(), Error> {
    let name = &rr.ctx.config.worker.service_account_name;
    if rr.service_account(name).await?.is_some() {
        return Ok(());
    }
    let applied = {
        let mut accounts = rr
            .ctx
            .worker_accounts
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let cell = accounts.entry(rr.ns.clone()).or_default();
        if cell.get().is_some_and(|at| at.elapsed() > SA_REAPPLY) {
            *cell = Default::default();
        }
        cell.clone()
    };
    applied
        .get_or_try_init(|| async {
            rr.apply_service_account(name).await?;
            Ok::<_, Error>(Instant::now())
        })
        .await?;
    Ok(())
}

/// With `natsCredentials` configured: the copy of the operator's NATS credentials in `ns`
/// that worker pods mount, applied when its content changed (a rotation) or went unchecked for
/// `NATS_COPY_REFRESH`. Credentials are read from the mounted Secret each time.
///
/// The first starts in a namespace run at once (up to the reconciler's concurrency): they take
/// the namespace's lock in turn, so the first applies the copy and the others find it fresh,
/// instead of one apply each.
pub(super) async fn ensure_nats_credentials(ctx: &Context, ns: &str) -> Result<(), Error> {
    let cfg = &ctx.config.nats_credentials;
    if cfg.dir.is_empty() {
        return Ok(());
    }
    let auth = cfg.load()?;
    let cell = ctx
        .nats_copies
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(ns.to_owned())
        .or_default()
        .clone();
    let mut copy = cell.lock().await;
    let fresh = copy
        .as_ref()
        .is_some_and(|(applied, at)| *applied == auth && at.elapsed() < NATS_COPY_REFRESH);
    if fresh {
        return Ok(());
    }
    let secret = nats_credentials_secret(&cfg.worker_secret, ns, auth.secret_data());
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    api.patch(
        &cfg.worker_secret,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&secret),
    )
    .await?;
    *copy = Some((auth, Instant::now()));
    tracing::debug!(namespace = ns, secret = %cfg.worker_secret, "NATS credentials copy applied");
    Ok(())
}
