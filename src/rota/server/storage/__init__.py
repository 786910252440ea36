"""The daemon's side of storage: workspaces (their owners, sizes, sync to a bucket,
cleanup), datasets (registry, uploads, cache), artifacts and share links, model cards.
A path a user can name is touched only through ``rota.storage.owner_files``. May import
``access``; of the job records only their types."""
