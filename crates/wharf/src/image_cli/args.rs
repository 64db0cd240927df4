//! Command-line grammar of Wharf's image commands.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// What an image command works on, and the command (the global options come from the
/// whole command line's grammar, [`crate::cli`]).
#[derive(Debug)]
pub struct Cli {
    /// State directory (images, snapshots, metadata).
    pub root: PathBuf,
    /// Runtime directory (to tell a lost store from a new one).
    pub run: PathBuf,
    /// Wharf's config file.
    pub config: PathBuf,
    /// The command.
    pub cmd: Cmd,
}

/// `wharf pull` flags.
#[derive(Args, Debug)]
pub struct PullArgs {
    /// Platform to pick from a multi-platform image (os/arch[/variant]).
    #[arg(long)]
    pub platform: Option<String>,
    /// Registry credentials (user:password); default: docker's config.json.
    #[arg(long)]
    pub creds: Option<String>,
    /// Print only the image name when done.
    #[arg(short, long)]
    pub quiet: bool,
    /// Parallel layer downloads.
    #[arg(long, default_value_t = 3)]
    pub jobs: usize,
    /// Image (name[:tag] or name@digest).
    pub image: String,
}

/// `wharf images` flags.
#[derive(Args, Debug)]
pub struct ListArgs {
    /// table, json (one object per line), or a Go template (`{{.Repository}}:{{.Tag}}`,
    /// `table {{.ID}}\t{{.Size}}`).
    #[arg(long, default_value = "table")]
    pub format: String,
    /// Print image ids only.
    #[arg(short, long)]
    pub quiet: bool,
    /// Show manifest digests.
    #[arg(long)]
    pub digests: bool,
    /// Show intermediate images too (the builder's step images).
    #[arg(short, long)]
    pub all: bool,
}

/// `wharf tag` arguments.
#[derive(Args, Debug)]
pub struct TagArgs {
    /// The image (name or id).
    pub source: String,
    /// The new name.
    pub target: String,
}

/// `wharf push` arguments.
#[derive(Args, Debug)]
pub struct PushArgs {
    /// Print nothing but errors.
    #[arg(short, long)]
    pub quiet: bool,
    /// The image (`registry/repository[:tag]`).
    pub image: String,
}

/// `wharf history` flags.
#[derive(Args, Debug)]
pub struct HistoryArgs {
    /// Whole commands and ids.
    #[arg(long = "no-trunc")]
    pub no_trunc: bool,
    /// Ids only.
    #[arg(short, long)]
    pub quiet: bool,
    /// table, json, or a Go template (`{{.CreatedBy}} {{.Size}}`).
    #[arg(long, default_value = "table")]
    pub format: String,
    /// The image.
    pub image: String,
}

/// `wharf rmi` flags.
#[derive(Args, Debug)]
pub struct RmiArgs {
    /// Remove an image with several names by id.
    #[arg(short, long)]
    pub force: bool,
    /// Images (names or ids).
    #[arg(required = true)]
    pub images: Vec<String>,
}

/// Commands.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Pull an image from a registry.
    Pull(PullArgs),
    /// List images.
    Images(ListArgs),
    /// Remove images.
    Rmi(RmiArgs),
    /// Manage images.
    Image {
        #[command(subcommand)]
        cmd: ImageCmd,
    },
    /// Give an image another name.
    Tag(TagArgs),
    /// Show how an image was built (its history, newest first).
    History(HistoryArgs),
    /// Push an image to its registry.
    Push(PushArgs),
    /// Log in to a registry (credentials kept in docker's config.json, or its credsStore).
    Login {
        /// User name.
        #[arg(short, long)]
        username: Option<String>,
        /// Password (or token).
        #[arg(short, long)]
        password: Option<String>,
        /// Read the password from stdin.
        #[arg(long = "password-stdin")]
        password_stdin: bool,
        /// The registry (default: Docker Hub).
        server: Option<String>,
    },
    /// Forget a registry's credentials.
    Logout {
        /// The registry (default: Docker Hub).
        server: Option<String>,
    },
    /// Load images from an OCI layout or `docker save` tarball.
    Load {
        /// Archive (default: stdin).
        #[arg(short, long)]
        input: Option<PathBuf>,
        /// Print only the loaded names.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Save images to a tarball.
    Save {
        /// Output file (default: stdout).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// docker (docker save / docker load) or oci (OCI image layout).
        #[arg(long, default_value = "docker")]
        format: String,
        /// Images.
        #[arg(required = true)]
        images: Vec<String>,
    },
    /// Create a one-layer image from a root filesystem tarball.
    Import {
        /// Dockerfile instructions for the image's config: CMD, ENTRYPOINT, ENV, EXPOSE,
        /// LABEL, USER, WORKDIR, VOLUME, STOPSIGNAL.
        #[arg(short = 'c', long = "change")]
        change: Vec<String>,
        /// A comment for the image's history.
        #[arg(short = 'm', long)]
        message: Option<String>,
        /// The tarball (`-` for stdin; gzip or zstd compressed or plain).
        file: String,
        /// Name for the image.
        reference: Option<String>,
    },
}

/// `wharf image ...`.
#[derive(Subcommand, Debug)]
pub enum ImageCmd {
    /// Give an image another name.
    Tag(TagArgs),
    /// Show how an image was built (its history, newest first).
    History(HistoryArgs),
    /// Push an image to its registry.
    Push(PushArgs),
    /// Show images' manifests and configs as JSON.
    Inspect {
        /// json, or a Go template (`{{.Config.Cmd}}`).
        #[arg(short, long)]
        format: Option<String>,
        /// Images.
        #[arg(required = true)]
        images: Vec<String>,
    },
    /// Remove unused images (without names; with --all every image no container uses).
    Prune {
        /// Every unused image, not only those without names.
        #[arg(short, long)]
        all: bool,
        /// Accepted for docker's sake (image prune does not ask).
        #[arg(short, long)]
        force: bool,
    },
    /// Mount a read-only view of an image and print its path.
    Mount {
        /// Image.
        image: String,
    },
    /// Unmount an image view.
    Unmount {
        /// Image.
        image: String,
    },
    /// Pull an image (same as wharf pull).
    Pull(PullArgs),
    /// List images (same as wharf images).
    #[command(alias = "list")]
    Ls(ListArgs),
    /// Remove images (same as wharf rmi).
    Rm(RmiArgs),
}
