//! A client of systemd's manager object (org.freedesktop.systemd1.Manager).

use std::time::{Duration, Instant};

use zbus::blocking::Connection;
use zbus::zvariant::{ObjectPath, OwnedObjectPath, OwnedValue, Value as ZValue};

use crate::properties::{Property, Value};
use crate::{Error, Result};

const DEST: &str = "org.freedesktop.systemd1";
const PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
/// How long a unit's job may take. Starting a scope takes a few milliseconds; a stop waits
/// for the unit's processes to exit.
const JOB_DEADLINE: Duration = Duration::from_secs(90);

/// How long one call may wait for systemd's answer: zbus waits forever, and a command that
/// hangs on a lost reply helps nobody. 25 s, as sd-bus and libdbus wait by default.
const METHOD_TIMEOUT: Duration = Duration::from_secs(25);

/// A connection to systemd.
pub struct Manager {
    conn: Connection,
}

impl Manager {
    /// Connect on the system bus, as runc and crun do. (systemd's private socket, which
    /// systemctl uses as root, names itself in its messages' sender field with a name zbus
    /// refuses, and zbus's reader then aborts the process.)
    pub fn connect() -> Result<Manager> {
        crate::require_booted()?;
        let conn = zbus::blocking::connection::Builder::system()
            .map(|b| b.method_timeout(METHOD_TIMEOUT))
            .and_then(|b| b.build())
            .map_err(|e| {
                Error::NoSystemd(format!(
                    "cannot reach systemd on the system bus ({e}): is dbus installed and \
                     running (apt-get install dbus)?"
                ))
            })?;
        Ok(Manager { conn })
    }

    fn call<B>(&self, unit: &str, method: &str, body: &B) -> Result<zbus::message::Message>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        self.conn
            .call_method(Some(DEST), PATH, Some(MANAGER), method, body)
            .map_err(|e| unit_error(unit, method, e))
    }

    /// Start scope `unit` in `slice` holding `pids`, with `Delegate=yes` (the sub-cgroups
    /// below it are the caller's) and `props`; returns once systemd has started it.
    pub fn start_scope(
        &self,
        unit: &str,
        slice: &str,
        description: &str,
        pids: &[u32],
        props: &[Property],
    ) -> Result<()> {
        let mut all = vec![
            ("Description", ZValue::from(description)),
            ("Slice", ZValue::from(slice)),
            ("Delegate", ZValue::from(true)),
            ("PIDs", ZValue::from(pids.to_vec())),
            // Gone once empty, failed or not: a pod started again reuses the name.
            ("CollectMode", ZValue::from("inactive-or-failed")),
            // Not stopped by systemd's shutdown transaction: the engine's own shutdown
            // stops the containers in order (wharf-restore.service), as runc's scopes are.
            ("DefaultDependencies", ZValue::from(false)),
        ];
        all.extend(props.iter().map(|p| (p.name, zvalue(&p.value))));
        let aux: Vec<(&str, Vec<(&str, ZValue<'_>)>)> = Vec::new();
        let reply = self.call(unit, "StartTransientUnit", &(unit, "fail", all, aux))?;
        let job: OwnedObjectPath = reply
            .body()
            .deserialize()
            .map_err(|e| unit_error(unit, "StartTransientUnit", e))?;
        self.wait_job(unit, &job)?;
        match self.active_state(unit)?.as_deref() {
            Some("active") => Ok(()),
            state => Err(Error::Unit {
                unit: unit.to_string(),
                message: format!(
                    "did not start (state {}, result {})",
                    state.unwrap_or("gone"),
                    self.unit_property(unit, "org.freedesktop.systemd1.Scope", "Result")
                        .unwrap_or_else(|| "unknown".into())
                ),
            }),
        }
    }

    /// Move `pids` into `unit`, at `subcgroup` below it ("/" for its own cgroup).
    pub fn attach(&self, unit: &str, subcgroup: &str, pids: &[u32]) -> Result<()> {
        self.call(
            unit,
            "AttachProcessesToUnit",
            &(unit, subcgroup, pids.to_vec()),
        )
        .map(drop)
    }

    /// Change `unit`'s properties for as long as it runs (systemctl set-property --runtime).
    pub fn set_properties(&self, unit: &str, props: &[Property]) -> Result<()> {
        let all: Vec<(&str, ZValue<'_>)> =
            props.iter().map(|p| (p.name, zvalue(&p.value))).collect();
        self.call(unit, "SetUnitProperties", &(unit, true, all))
            .map(drop)
    }

    /// Stop `unit` (its remaining processes are killed) and wait until it is gone; a unit
    /// that does not exist is already stopped.
    pub fn stop(&self, unit: &str) -> Result<()> {
        let reply = match self.conn.call_method(
            Some(DEST),
            PATH,
            Some(MANAGER),
            "StopUnit",
            &(unit, "replace"),
        ) {
            Ok(r) => r,
            Err(e) if no_such_unit(&e) => return Ok(()),
            Err(e) => return Err(unit_error(unit, "StopUnit", e)),
        };
        let job: OwnedObjectPath = reply
            .body()
            .deserialize()
            .map_err(|e| unit_error(unit, "StopUnit", e))?;
        self.wait_job(unit, &job)?;
        self.reset_failed(unit);
        Ok(())
    }

    /// Forget a failed unit, so that its name can be used again.
    pub fn reset_failed(&self, unit: &str) {
        let _ = self.call(unit, "ResetFailedUnit", &(unit,));
    }

    /// The unit's ActiveState ("active", "failed"...), None when systemd has no such unit.
    pub fn active_state(&self, unit: &str) -> Result<Option<String>> {
        let reply =
            match self
                .conn
                .call_method(Some(DEST), PATH, Some(MANAGER), "GetUnit", &(unit,))
            {
                Ok(r) => r,
                Err(e) if no_such_unit(&e) => return Ok(None),
                Err(e) => return Err(unit_error(unit, "GetUnit", e)),
            };
        let path: OwnedObjectPath = reply
            .body()
            .deserialize()
            .map_err(|e| unit_error(unit, "GetUnit", e))?;
        Ok(self.get_string(&path, "org.freedesktop.systemd1.Unit", "ActiveState"))
    }

    fn unit_property(&self, unit: &str, iface: &str, name: &str) -> Option<String> {
        let reply = self
            .conn
            .call_method(Some(DEST), PATH, Some(MANAGER), "GetUnit", &(unit,))
            .ok()?;
        let path: OwnedObjectPath = reply.body().deserialize().ok()?;
        self.get_string(&path, iface, name)
    }

    fn get(&self, path: &ObjectPath<'_>, iface: &str, name: &str) -> zbus::Result<OwnedValue> {
        let reply = self.conn.call_method(
            Some(DEST),
            path,
            Some("org.freedesktop.DBus.Properties"),
            "Get",
            &(iface, name),
        )?;
        reply.body().deserialize::<OwnedValue>()
    }

    fn get_string(&self, path: &ObjectPath<'_>, iface: &str, name: &str) -> Option<String> {
        let v = self.get(path, iface, name).ok()?;
        String::try_from(v).ok()
    }

    /// Wait until systemd has finished `job` (its object is gone then).
    fn wait_job(&self, unit: &str, job: &ObjectPath<'_>) -> Result<()> {
        let deadline = Instant::now() + JOB_DEADLINE;
        let mut pause = Duration::from_micros(200);
        while self
            .get(job, "org.freedesktop.systemd1.Job", "State")
            .is_ok()
        {
            if Instant::now() > deadline {
                return Err(Error::Unit {
                    unit: unit.to_string(),
                    message: format!("its job {job} did not finish within {JOB_DEADLINE:?}"),
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
        Ok(())
    }
}

fn zvalue(v: &Value) -> ZValue<'_> {
    match v {
        Value::U64(n) => ZValue::from(*n),
        Value::Bool(b) => ZValue::from(*b),
        Value::Str(s) => ZValue::from(s.as_str()),
        Value::Bytes(b) => ZValue::from(b.clone()),
        Value::U32s(p) => ZValue::from(p.clone()),
    }
}

fn no_such_unit(e: &zbus::Error) -> bool {
    matches!(e, zbus::Error::MethodError(name, _, _)
        if name.as_str() == "org.freedesktop.systemd1.NoSuchUnit")
}

fn unit_error(unit: &str, method: &str, e: zbus::Error) -> Error {
    let message = match &e {
        zbus::Error::MethodError(name, Some(detail), _) => format!("{method}: {detail} ({name})"),
        zbus::Error::MethodError(name, None, _) => format!("{method}: {name}"),
        other => format!("{method}: {other}"),
    };
    Error::Unit {
        unit: unit.to_string(),
        message,
    }
}
