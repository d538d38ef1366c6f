"""Config and Runner helpers of the tools: load a config, build its Runner, stretch a schedule.

Examples:
    >>> from mmposenc.utils.tools.runner import drop_pretrained
    >>> cfg = dict(init_cfg=dict(type='Pretrained', checkpoint='r50.pth'))
    >>> drop_pretrained(cfg), cfg
    (['r50.pth'], {'init_cfg': None})
"""
import os.path as osp

HOSTS = ('mmdet', 'mmseg', 'mmpretrain')


def resolve_config_path(path: str) -> str:
    """The file of a config named as a path or as a package's config, ``'mmdet::dino/x.py'``
    / ``'mmposenc::peg_dino/x.py'`` (the spelling of ``_base_``), resolved as mmengine
    resolves a base: from the installed package's ``.mim/configs`` (mmposenc's from the source
    checkout too).

    Raises:
        FileNotFoundError: no such file (a package's config: named with the file it looked for).
        ModuleNotFoundError: the package of ``'pkg::...'`` is not installed.

    Examples:
        >>> resolve_config_path('mmposenc::smoke/detr_r18_1xb2-8it_coco128.py').endswith(
        ...     'configs/smoke/detr_r18_1xb2-8it_coco128.py')
        True
    """
    if osp.isfile(path):
        return path
    package, sep, rel = path.partition('::')
    if not sep or not package.isidentifier() or not rel:
        raise FileNotFoundError(f'config file {path} does not exist')
    from mmengine.config import Config
    from mmengine.config.utils import PKG2PROJECT

    import mmposenc  # noqa: F401  (lets ``mmposenc::`` resolve from a source checkout)
    if package not in PKG2PROJECT:
        raise FileNotFoundError(
            f'config file {path} does not exist (mmengine resolves "pkg::" configs of '
            f'{", ".join(sorted(PKG2PROJECT))} only; give {package}\'s config by its path)')
    try:
        found, _ = Config._get_cfg_path(path, '')
    except (FileNotFoundError, ValueError) as e:  # mmengine: no such file / no metafile entry
        raise FileNotFoundError(f'config file {path} does not exist ({e})') from None
    if not osp.isfile(found):
        raise FileNotFoundError(f'config file {path} does not exist ({found} is missing)')
    return found


def load_config(path, cfg_options=None, work_dir=None, launcher='none'):
    """Load ``path`` (a file, or a package's config: ``'mmdet::dino/x.py'``, see
    :func:`resolve_config_path`), apply ``--cfg-options`` and choose the work dir.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ModuleNotFoundError: the package of a ``'pkg::...'`` path is not installed.
        ValueError: the config names no ``default_scope`` among the supported hosts.
    """
    from mmengine.config import Config

    import mmposenc  # noqa: F401  (lets `_base_ = 'mmposenc::...'` resolve; see mmposenc.utils)

    path = resolve_config_path(path)
    cfg = Config.fromfile(path)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    scope = cfg.get('default_scope', None)
    if scope not in HOSTS + ('mmposenc', 'mmengine'):
        raise ValueError(f'config {path} has default_scope={scope!r}; expected one of '
                         f'{HOSTS} (inherit a host base config such as '
                         "'mmdet::_base_/default_runtime.py')")
    cfg.launcher = launcher
    if launcher != 'none':
        _adapt_distributed_to_cpu(cfg)
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(path))[0])
    return cfg


def _adapt_distributed_to_cpu(cfg):
    """Let a distributed launch run on CPU-only machines (gloo, DDP without device_ids).

    See docs/user_guides/train_test.md for why mmengine alone fails there.
    """
    import torch
    if torch.cuda.is_available():
        return
    cfg.setdefault('env_cfg', {})
    cfg.env_cfg.setdefault('dist_cfg', {})
    cfg.env_cfg.dist_cfg['backend'] = 'gloo'
    wrapper = cfg.get('model_wrapper_cfg', None) or dict(type='MMDistributedDataParallel')
    wrapper.setdefault('device_ids', None)
    cfg.model_wrapper_cfg = wrapper
    if cfg.launcher == 'pytorch':
        import torch.distributed as dist
        if not dist.is_initialized():
            timeout = cfg.env_cfg.dist_cfg.get('timeout', None)
            kwargs = {} if timeout is None else dict(timeout=timeout)
            dist.init_process_group(backend='gloo', **kwargs)


def build_runner(cfg, first_log_line=None):
    """Build the Runner named by ``runner_type`` (mmengine's ``Runner`` by default).

    Args:
        cfg (Config): The config.
        first_log_line (str, optional): A warning logged as the first line of the run's log
            (before the environment and the config; with a custom ``runner_type``, right after
            them). Defaults to None.
    """
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner

    import mmposenc.registry  # noqa: F401  (puts the mmposenc scope into the registry tree)
    if 'runner_type' in cfg:
        runner = RUNNERS.build(cfg)
        if first_log_line:
            runner.logger.warning(first_log_line)
        return runner
    if not first_log_line:
        return Runner.from_cfg(cfg)

    class FirstLineRunner(Runner):
        """mmengine's Runner whose log starts with ``first_log_line``."""

        def build_logger(self, *args, **kwargs):
            logger = super().build_logger(*args, **kwargs)
            logger.warning(first_log_line)
            return logger

    return FirstLineRunner.from_cfg(cfg)


def stretch_schedule(cfg, iters):
    """Set an iteration-based config to ``iters`` iterations with its schedule stretched: the
    LinearLR warm-up kept (at most a tenth of the run), every other scheduler ending at
    ``iters`` and its milestones at the same fractions of the run as in the config.
    Used by tools/demo.py and projects/detection_resolution/detection_resolution_study.py."""
    config_iters = cfg.train_cfg.max_iters
    cfg.train_cfg.max_iters = iters
    for sched in cfg.param_scheduler:
        if sched.type == 'LinearLR':
            sched.end = max(1, min(sched.end, iters // 10))
        else:
            sched.end = iters
            if 'milestones' in sched:
                sched.milestones = [max(1, round(m * iters / config_iters))
                                    for m in sched.milestones]


def drop_pretrained(cfg):
    """Remove every ``init_cfg`` of type ``'Pretrained'`` from a model config, in place.

    For weights that come from elsewhere or are random: nothing is downloaded (a shipped R50
    config would otherwise fetch torchvision's ResNet-50). ``cfg`` may be any dict holding an
    ``init_cfg``, e.g. ``dict(init_cfg=module.init_cfg)`` for a built module.

    Returns:
        list[str]: The checkpoints that were dropped.
    """
    dropped = []
    if isinstance(cfg, dict):
        init = cfg.get('init_cfg')
        inits = init if isinstance(init, (list, tuple)) else [init]
        if any(isinstance(i, dict) and i.get('type') == 'Pretrained' for i in inits):
            dropped += [str(i.get('checkpoint')) for i in inits
                        if isinstance(i, dict) and i.get('type') == 'Pretrained']
            kept = [i for i in inits if not (isinstance(i, dict) and i.get('type') == 'Pretrained')]
            cfg['init_cfg'] = kept if isinstance(init, (list, tuple)) else None
        for key, value in cfg.items():
            if key != 'init_cfg':
                dropped += drop_pretrained(value)
    elif isinstance(cfg, (list, tuple)):
        for value in cfg:
            dropped += drop_pretrained(value)
    return dropped
