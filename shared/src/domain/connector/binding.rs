//! A binding: which install serves a connector task's need (SPEC §5, §8).
//! The one rule, [`check_binding`], has three callers: admin's approve
//! refuses what it refuses, reconcile holds a task whose stored binding it
//! refuses (`need_unbound`, `reconcile::settle_holds`), and the runner offers
//! a bound install's tools only when it still allows them.
//!
//! Invariant: a need binds only to an installed workspace install of the
//! task's workspace that is neither the declaring install nor another
//! install of the declaring server (that would bypass `tools`); never to a
//! personal install or one that is not installed.

use std::collections::BTreeMap;

use crate::domain::task::install::{Install, InstallScope};
use crate::domain::task::{Provenance, Task};

/// Why a need may not be bound to an install (SPEC §5, §8).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindingRefusal {
    #[error("install `{0}` is not an installed connector of this workspace")]
    NotInstalled(String),
    #[error("install `{0}` is personal: only workspace connectors serve a need")]
    Personal(String),
    #[error(
        "install `{0}` declares this task: a need is never bound to the declaring install (its tools are limited by `tools`)"
    )]
    Declaring(String),
    #[error(
        "install `{install}` is another install of the declaring server `{server}`: a need is never bound to it (that would bypass `tools`)"
    )]
    SameServer { install: String, server: String },
}

/// Whether a connector task's need may be bound to `install_id`: an
/// installed workspace install of the task's workspace that is neither the
/// declaring install nor another install of the declaring server. Admin's
/// approve refuses what this refuses; reconcile holds a task whose stored
/// binding it refuses (`need_unbound`), so the runner never offers it.
pub fn check_binding(
    task: &Task,
    install_id: &str,
    installs: &BTreeMap<String, Install>,
) -> Result<(), BindingRefusal> {
    if let Provenance::Connector {
        install_id: declaring,
        server,
        ..
    } = &task.provenance
    {
        if declaring == install_id {
            return Err(BindingRefusal::Declaring(install_id.to_owned()));
        }
        if let Some(bound) = installs.get(install_id)
            && bound.server == *server
        {
            return Err(BindingRefusal::SameServer {
                install: install_id.to_owned(),
                server: server.clone(),
            });
        }
    }
    match installs.get(install_id) {
        Some(bound) if bound.workspace != task.workspace => Err(BindingRefusal::NotInstalled(install_id.to_owned())),
        Some(bound) if bound.may_serve_a_need() => Ok(()),
        Some(bound) if bound.scope == InstallScope::Personal => Err(BindingRefusal::Personal(install_id.to_owned())),
        _ => Err(BindingRefusal::NotInstalled(install_id.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::task::install::InstallStatus;
    use crate::domain::task::install::tests_support::install;
    use crate::domain::task::tests_support::connector_task;
    use chrono::{TimeZone, Utc};

    #[test]
    fn a_need_binds_only_to_another_servers_workspace_install() {
        let task = connector_task(Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap());
        let Provenance::Connector {
            install_id: declaring,
            server,
            ..
        } = task.provenance.clone()
        else {
            panic!("a connector task");
        };
        let mut other_ws = install("ins_far", "chat", InstallScope::Workspace, InstallStatus::Installed);
        other_ws.workspace = "ws_2".into();
        let installs: BTreeMap<String, Install> = [
            install(&declaring, &server, InstallScope::Workspace, InstallStatus::Installed),
            install("ins_twin", &server, InstallScope::Workspace, InstallStatus::Installed),
            install("ins_chat", "chat", InstallScope::Workspace, InstallStatus::Installed),
            install("ins_mine", "mail", InstallScope::Personal, InstallStatus::Installed),
            install("ins_gone", "drive", InstallScope::Workspace, InstallStatus::Uninstalled),
            other_ws,
        ]
        .into_iter()
        .map(|i| (i.install_id.clone(), i))
        .collect();
        assert_eq!(check_binding(&task, "ins_chat", &installs), Ok(()));
        for (id, expected) in [
            (declaring.as_str(), BindingRefusal::Declaring(declaring.clone())),
            (
                "ins_twin",
                BindingRefusal::SameServer {
                    install: "ins_twin".into(),
                    server: server.clone(),
                },
            ),
            ("ins_mine", BindingRefusal::Personal("ins_mine".into())),
            ("ins_gone", BindingRefusal::NotInstalled("ins_gone".into())),
            ("ins_far", BindingRefusal::NotInstalled("ins_far".into())),
            ("ins_none", BindingRefusal::NotInstalled("ins_none".into())),
        ] {
            assert_eq!(check_binding(&task, id, &installs), Err(expected), "{id}");
        }
        // The declaring install is refused even when its record is missing.
        assert_eq!(
            check_binding(&task, &declaring, &BTreeMap::new()),
            Err(BindingRefusal::Declaring(declaring.clone()))
        );
    }
}
