//! A parsed Dockerfile: stages of instructions, unexpanded.

/// A whole Dockerfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dockerfile {
    /// ARGs before the first FROM (usable in FROM lines; a stage sees their values only
    /// after an `ARG NAME` of its own, as docker has it).
    pub global_args: Vec<ArgDecl>,
    /// The stages, in order.
    pub stages: Vec<Stage>,
    /// The `escape` parser directive (`\` unless set to a backtick).
    pub escape: char,
}

/// One stage: a FROM and what follows until the next FROM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// `AS name`, lowercased as docker compares them.
    pub name: Option<String>,
    /// The base as written (`busybox:1`, `$BASE`, `scratch`, an earlier stage's name):
    /// expanded with the global ARGs by the builder.
    pub from: String,
    /// `--platform=...` as written, if given.
    pub platform: Option<String>,
    /// 1-based line of the FROM.
    pub line: usize,
    /// Its instructions after the FROM.
    pub instructions: Vec<Instruction>,
}

/// An ARG declaration: its name and default, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgDecl {
    /// The name.
    pub name: String,
    /// `=default`, unexpanded.
    pub default: Option<String>,
}

/// One instruction of a stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instruction {
    /// 1-based line where it starts.
    pub line: usize,
    /// Its source text, continuation lines joined (what errors show).
    pub text: String,
    /// What it says.
    pub kind: Kind,
}

/// A command in shell form (run by the stage's SHELL) or exec form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `RUN echo hi`: one string for the shell.
    Shell(String),
    /// `RUN ["echo", "hi"]`: the argv itself.
    Exec(Vec<String>),
}

/// A here-document of RUN or COPY (`<<EOF` ... `EOF`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HereDoc {
    /// Its body, lines joined with `\n`, ending with one.
    pub body: String,
    /// Variables are expanded in it (an unquoted delimiter).
    pub expand: bool,
    /// Its delimiter (`EOF`): the name of the file `COPY <<NAME /dir/` writes.
    pub name: String,
}

/// A `RUN --mount=...` (BuildKit): `type=cache|secret|bind` and its options as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunMount {
    /// `type=` (bind when absent, as BuildKit has it).
    pub kind: String,
    /// The other `key=value` options in order (`target`, `id`, `source`, `from`...);
    /// a bare key has an empty value.
    pub options: Vec<(String, String)>,
}

/// HEALTHCHECK's settings, durations as written (`30s`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// The test: `CMD` args (exec or shell form).
    pub test: Command,
    /// `--interval`.
    pub interval: Option<String>,
    /// `--timeout`.
    pub timeout: Option<String>,
    /// `--start-period`.
    pub start_period: Option<String>,
    /// `--start-interval`.
    pub start_interval: Option<String>,
    /// `--retries`.
    pub retries: Option<String>,
}

/// What an instruction says. Values are unexpanded unless said otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// RUN: its command, here-documents, `--mount`s and `--network`.
    Run {
        /// The command. For `RUN <<EOF bash`, the shell form holding the first line after
        /// the flags, markers included (`<<EOF bash`): the shell can be given that line,
        /// the bodies and their delimiters, or a lone `<<EOF`'s body run as a script.
        command: Command,
        /// Here-documents, in order.
        heredocs: Vec<HereDoc>,
        /// `--mount=` options.
        mounts: Vec<RunMount>,
        /// `--network=`.
        network: Option<String>,
    },
    /// COPY or ADD.
    Copy {
        /// ADD (URLs, local tars extracted) rather than COPY.
        add: bool,
        /// `--from=` stage name, index or image.
        from: Option<String>,
        /// `--chown=`.
        chown: Option<String>,
        /// `--chmod=`.
        chmod: Option<String>,
        /// `--link`.
        link: bool,
        /// The sources as written (paths, globs, URLs).
        sources: Vec<String>,
        /// Here-documents as sources (`COPY <<EOF /dst`).
        heredocs: Vec<HereDoc>,
        /// The destination as written.
        dest: String,
    },
    /// ENV: key and value pairs. Keys have their quotes removed; values are as written
    /// (quotes and escapes kept, as docker's parser leaves them): the builder's
    /// [`crate::expand::expand`] expands them and removes the quotes, which is what keeps
    /// `ENV A='$HOME'` the literal `$HOME` and `ENV A="x y"` the text `x y`.
    Env(Vec<(String, String)>),
    /// ARG: declarations.
    Arg(Vec<ArgDecl>),
    /// LABEL: key and value pairs; as for ENV, keys unquoted, values as written, for
    /// [`crate::expand::expand`].
    Label(Vec<(String, String)>),
    /// CMD.
    Cmd(Command),
    /// ENTRYPOINT.
    Entrypoint(Command),
    /// WORKDIR.
    Workdir(String),
    /// USER.
    User(String),
    /// EXPOSE: ports as written (`80`, `53/udp`).
    Expose(Vec<String>),
    /// VOLUME: paths (JSON array or words).
    Volume(Vec<String>),
    /// STOPSIGNAL.
    StopSignal(String),
    /// HEALTHCHECK: None for `HEALTHCHECK NONE`.
    Healthcheck(Option<Health>),
    /// SHELL: the new shell argv.
    Shell(Vec<String>),
    /// ONBUILD: the trigger instruction's text.
    OnBuild(String),
    /// MAINTAINER (deprecated; sets the author).
    Maintainer(String),
}
