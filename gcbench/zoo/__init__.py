"""Model zoo: architectures on torch's meta device -> per-tensor compute profiles.

`catalog` and `devices` import nothing heavy (config validation uses them); `nets` and
`profile` import torch and are loaded only when a profile is built.
"""
