//! Engine errors as gRPC statuses: the error's kind chooses the code (what kubelet reacts
//! to), its message (naming the object and the cause) is the status message.

use tonic::{Code, Status};
use wharf_engine::error::ErrorKind;

/// The gRPC status of an engine error.
pub fn from_engine(e: wharf_engine::Error) -> Status {
    Status::new(code(e.kind()), e.to_string())
}

fn code(kind: ErrorKind) -> Code {
    match kind {
        ErrorKind::NotFound => Code::NotFound,
        ErrorKind::AlreadyExists => Code::AlreadyExists,
        ErrorKind::InvalidArgument => Code::InvalidArgument,
        ErrorKind::FailedPrecondition => Code::FailedPrecondition,
        ErrorKind::ResourceExhausted => Code::ResourceExhausted,
        ErrorKind::Unavailable => Code::Unavailable,
        ErrorKind::Unauthenticated => Code::Unauthenticated,
        // A container whose program cannot run: the request was fine, the container is not
        // (containerd reports these as Unknown with the runtime's message).
        ErrorKind::ProgramNotFound | ErrorKind::ProgramNotExecutable => Code::FailedPrecondition,
        ErrorKind::Internal => Code::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_become_codes_and_messages_stay() {
        let s = from_engine(wharf_engine::Error::NotFound {
            kind: "container",
            name: "abc".into(),
        });
        assert_eq!(s.code(), Code::NotFound);
        assert_eq!(s.message(), "no such container: abc");
        let s = from_engine(wharf_engine::Error::Precondition("pod p is dead".into()));
        assert_eq!(s.code(), Code::FailedPrecondition);
        let s = from_engine(wharf_engine::Error::Invalid("bad".into()));
        assert_eq!(s.code(), Code::InvalidArgument);
    }
}
