#!/usr/bin/env python3
"""Writes three deliberately broken copies of driver/ into build/bugs/<kind>/driver (run from the
checkout): leak (a kmalloc lost on every BO_INFO), lock (BO_INFO and JOB_WAIT take the file lock
and the memory lock in opposite orders), uaf (a write to a job after it was freed)."""
import os
import shutil

BUGS = {
    "leak": [("spyre_gem.c", "\tobj = drm_gem_object_lookup(file, args->handle);\n\tif (!obj)\n\t\treturn -ENOENT;\n\tbo = to_spyre_bo(obj);",
              "\t{\t/* BUG on purpose: a leak on every BO_INFO */\n\t\tvoid *leak = kmalloc(64, GFP_KERNEL);\n\n\t\tOPTIMIZER_HIDE_VAR(leak);\n\t}\n"
              "\tobj = drm_gem_object_lookup(file, args->handle);\n\tif (!obj)\n\t\treturn -ENOENT;\n\tbo = to_spyre_bo(obj);")],
    "lock": [("spyre_gem.c", "\tobj = drm_gem_object_lookup(file, args->handle);\n\tif (!obj)\n\t\treturn -ENOENT;\n\tbo = to_spyre_bo(obj);",
              "\t{\t/* BUG on purpose: file lock, then memory lock */\n\t\tstruct spyre_file *sf = file->driver_priv;\n\n"
              "\t\tmutex_lock(&sf->lock);\n\t\tmutex_lock(&to_spyre_dev(drm)->mm_lock);\n"
              "\t\tmutex_unlock(&to_spyre_dev(drm)->mm_lock);\n\t\tmutex_unlock(&sf->lock);\n\t}\n"
              "\tobj = drm_gem_object_lookup(file, args->handle);\n\tif (!obj)\n\t\treturn -ENOENT;\n\tbo = to_spyre_bo(obj);"),
             ("spyre_job.c", "\tif (args->flags || args->pad)\n\t\treturn -EINVAL;\n\n\tmutex_lock(&sf->lock);",
              "\tif (args->flags || args->pad)\n\t\treturn -EINVAL;\n\n"
              "\tmutex_lock(&to_spyre_dev(drm)->mm_lock);\t/* BUG on purpose: the other order */\n"
              "\tmutex_lock(&sf->lock);\n\tmutex_unlock(&sf->lock);\n\tmutex_unlock(&to_spyre_dev(drm)->mm_lock);\n"
              "\tmutex_lock(&sf->lock);")],
    "uaf": [("spyre_job.c", "\tkfree(job);\n}\n",
             "\tkfree(job);\n\tWRITE_ONCE(job->cmd_count, 0);\t/* BUG on purpose: use after free */\n}\n")],
}

for kind, edits in BUGS.items():
    top = os.path.join("build", "bugs", kind)
    shutil.rmtree(top, ignore_errors=True)
    os.makedirs(os.path.join(top, "driver"))
    for name in os.listdir("driver"):
        if name == "Makefile" or (name.endswith((".c", ".h")) and not name.endswith(".mod.c")):
            shutil.copy(os.path.join("driver", name), os.path.join(top, "driver", name))
    os.symlink("../../../uapi", os.path.join(top, "uapi"))
    os.symlink("../../../hw", os.path.join(top, "hw"))
    for name, old, new in edits:
        path = os.path.join(top, "driver", name)
        text = open(path).read()
        if text.count(old) < 1:
            raise SystemExit(f"make-variants: {kind}: the code to break in {name} has changed")
        open(path, "w").write(text.replace(old, new, 1))
